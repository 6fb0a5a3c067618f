package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/platform/region"
)

func newResidencyCmd(g *globalOptions) *cobra.Command {
	return parentCmd("residency", "Data residency: where every topic's and queue's events are, for auditors",
		newResidencyReportCmd(g), newResidencyCheckCmd(g), newResidencyAuditCmd(g))
}

func newResidencyCheckCmd(g *globalOptions) *cobra.Command {
	var regionName, config string
	cmd := &cobra.Command{
		Use:   "check --region REGION --config FILE",
		Short: "Whether a stream configuration may be created in a region under the residency policy",
		Long: `Checks a JetStream stream configuration (a JSON file, as nats stream add
--config takes) about to be created in REGION: every stream it mirrors or
sources, in any domain, must not hold data resident in another region (a
resident topic, queue or bucket, or any copy of one: residency propagates
through mirrors and sources), and a stream holding resident data may
republish only under its resident subjects. Prints "allowed" or exits
non-zero with the refusal, naming the resident object and its region.
Nothing is created. A source in another domain is named in the file by
"external": {"api": "$JS.<domain>.API"}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if regionName == "" || config == "" {
				return fmt.Errorf("residency check: --region and --config are required")
			}
			b, err := os.ReadFile(config)
			if err != nil {
				return fmt.Errorf("residency check: %w", err)
			}
			var sc jetstream.StreamConfig
			if err := json.Unmarshal(b, &sc); err != nil {
				return fmt.Errorf("residency check: %s is not a JSON stream configuration: %w", config, err)
			}
			if err := g.call(cmd.Context(), region.SubjCheck, region.StreamCheckRequest{Region: regionName, Config: sc}, nil); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "allowed: stream %s may be created in %s\n", sc.Name, regionName)
			return nil
		},
	}
	cmd.Flags().StringVar(&regionName, "region", "", "region the stream would be created in")
	cmd.Flags().StringVar(&config, "config", "", "JSON file of the stream configuration")
	return cmd
}

func newResidencyAuditCmd(g *globalOptions) *cobra.Command {
	var regionName string
	cmd := replyCmd(&cobra.Command{
		Use:   "audit [--region REGION]",
		Short: "The cross-border copies the residency gate and guard refused, for auditors",
		Long: `Lists the refusals recorded in each region's residency audit stream: every
stream create or update the residency gate refused at the JetStream API
request (remedy "refused"), and every stream the guard deleted or trimmed
after the fact, with the topic or queue and regions it named.`,
		Args: cobra.NoArgs,
	}, g.call, region.SubjAudit, func([]string) (any, error) {
		return region.AuditRequest{Region: regionName}, nil
	}, writeRefusals)
	cmd.Flags().StringVar(&regionName, "region", "", "only this region's refusals (default: every region)")
	return cmd
}

func writeRefusals(w io.Writer, refs []region.Refusal) error {
	if err := writeTable(w, "AT\tREGION\tSTREAM\tACTION\tREMEDY\tPROBLEMS", refs, func(w io.Writer, r region.Refusal) {
		remedy := r.Remedy
		if r.Error != "" {
			remedy += " (failed: " + r.Error + ")"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", r.At.UTC().Format(time.RFC3339), r.Region, r.Stream, r.Action, remedy, strings.Join(r.Problems, "; "))
	}); err != nil {
		return err
	}
	if len(refs) == 0 {
		fmt.Fprintln(w, "No refusals recorded.")
	}
	return nil
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
		Short: "Every topic and queue, its residency, where copies of it exist, and every violation found",
		Long: `Reads every stream of every region and lists each topic and queue, and
each KV bucket, object store or stream declaring a residency, with its
residency, the region its stream lives in, and every stream (in any region)
that mirrors or sources it, its dead-letter streams or a copy of them
(copies of copies included), and every republish of them. A violation is a
resident object whose stream or any copy is outside its region, a republish
of its data outside its resident subjects, or a region that could not be
read. Exits 1 when a violation is found.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var rep region.Report
			if err := g.call(cmd.Context(), region.SubjReport, nil, &rep); err != nil {
				return err
			}
			if err := writeOutput(cmd.OutOrStdout(), output, rep, writeResidencyReport); err != nil {
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

func writeResidencyReport(w io.Writer, rep region.Report) error {
	if err := writeTable(w, "NAME\tKIND\tRESIDENCY\tREGION\tCOPIES\tSTATUS", rep.Topics, func(w io.Writer, t region.TopicResidency) {
		var copies []string
		for _, c := range t.Copies {
			copies = append(copies, fmt.Sprintf("%s:%s(%s of %s)", c.Region, c.Stream, c.How, c.Of))
		}
		status := "ok"
		if len(t.Violations) > 0 {
			status = fmt.Sprintf("VIOLATION (%d)", len(t.Violations))
		}
		kind := t.Kind
		if kind == "" {
			kind = "topic" // a platformd before queue residency
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", t.Topic, kind, orDash(t.Residency), t.Region, orDash(strings.Join(copies, " ")), status)
	}); err != nil {
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
