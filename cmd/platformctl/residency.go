package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/platform"
)

func newResidencyCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "residency",
		Short: "Data residency: where every topic's events are, for auditors",
	}
	cmd.AddCommand(newResidencyReportCmd(g))
	return cmd
}

// errViolations makes `residency report` exit non-zero when it found any.
type errViolations int

func (e errViolations) Error() string {
	return fmt.Sprintf("residency report: %d violation(s) found", int(e))
}

func newResidencyReportCmd(g *globalOptions) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "report",
		Short: "Every topic, its residency, where copies of it exist, and every violation found",
		Long: `Reads every stream of every region and lists each topic, its residency, the
region its stream lives in, and every stream (in any region) that mirrors or
sources it or its dead-letter streams. A violation is a resident topic whose
stream or any copy is outside its region, or a region that could not be read.
Exits 1 when a violation is found.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var rep platform.ResidencyReport
			if err := g.call(cmd.Context(), platform.SubjResidencyReport, nil, &rep); err != nil {
				return err
			}
			if output == "json" {
				if err := writeJSON(cmd.OutOrStdout(), rep); err != nil {
					return err
				}
			} else if err := writeResidencyReport(cmd.OutOrStdout(), rep); err != nil {
				return err
			}
			if n := len(rep.Violations); n > 0 {
				return errViolations(n)
			}
			return nil
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

func writeResidencyReport(w io.Writer, rep platform.ResidencyReport) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tRESIDENCY\tREGION\tCOPIES\tSTATUS")
	for _, t := range rep.Topics {
		var copies []string
		for _, c := range t.Copies {
			copies = append(copies, fmt.Sprintf("%s:%s(%s of %s)", c.Region, c.Stream, c.How, c.Of))
		}
		status := "ok"
		if len(t.Violations) > 0 {
			status = fmt.Sprintf("VIOLATION (%d)", len(t.Violations))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.Topic, orDash(t.Residency), t.Region, orDash(strings.Join(copies, " ")), status)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(rep.Violations) == 0 {
		fmt.Fprintln(w, "\nNo violations.")
		return nil
	}
	fmt.Fprintln(w, "\nViolations:")
	for _, v := range rep.Violations {
		fmt.Fprintf(w, "  - %s\n", v)
	}
	return nil
}
