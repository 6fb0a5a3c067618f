package main

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/internal/cli"
	"github.com/msgplatform/platform/tenancy"
)

func newAuditCmd(g *globalOptions) *cobra.Command {
	var f tenancy.AuditFilter
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "audit [--tenant NAME] [--limit N]",
		Short: "List the audit log: admin changes (who, what, before/after), quota hits, authorization denials",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.Tenant != "" {
				if err := validTenant(f.Tenant); err != nil {
					return err
				}
			}
			if f.Limit < 0 {
				return cli.UsageError{Err: fmt.Errorf("--limit: want a positive number, got %d", f.Limit)}
			}
			var rs []tenancy.Record
			if err := g.call(cmd.Context(), tenancy.SubjAudit, f, &rs); err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				for _, r := range rs {
					if err := enc.Encode(r); err != nil {
						return err
					}
				}
				return nil
			}
			return writeTable(cmd.OutOrStdout(), "SEQ\tTIME\tTENANT\tACTION\tTARGET\tACTOR\tDETAIL", rs, func(w io.Writer, r tenancy.Record) {
				fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Seq, r.Time.Format(time.RFC3339), orDash(r.Tenant), r.Action, orDash(r.Target), r.Actor, orDash(r.Detail))
			})
		},
	}
	cmd.Flags().StringVar(&f.Tenant, "tenant", "", "only this tenant's records")
	cmd.Flags().IntVar(&f.Limit, "limit", 100, "show the last N records")
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON record per line, with before/after")
	return cmd
}
