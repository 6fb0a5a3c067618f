package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/internal/cli"
	"github.com/msgplatform/platform/redrive"
)

func newDLQCmd(g *globalOptions) *cobra.Command {
	var scope, userCreds string
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "Browse dead-letter queues: owners, depth, entries, failures grouped by fingerprint",
		Long: `Browse dead-letter queues. Without --tenant, the platform admin account's DLQs
(the declared catalog); with --tenant T, the DLQs of tenant T's topics and
queues, in T's own account.

With --user-creds FILE (a tenant user's .creds) the requests are signed and
show only what that user may see: the DLQs of the topics, queues and groups
it may consume (--sub).`,
	}
	cmd.PersistentFlags().StringVar(&scope, "tenant", "", "the tenant whose DLQs (default: the platform admin account's)")
	userCredsFlag(cmd.PersistentFlags(), &userCreds)
	cmd.AddCommand(newDLQListCmd(g, &scope, &userCreds), newDLQShowCmd(g, &scope, &userCreds), newDLQGroupsCmd(g, &scope, &userCreds))
	return cmd
}

func newDLQListCmd(g *globalOptions, scope, userCreds *string) *cobra.Command {
	return replyCmd(&cobra.Command{
		Use:   "list",
		Short: "List every DLQ with its owner, depth and oldest age",
		Args:  exactArgs(0, "no arguments"),
	}, g.signedBy(userCreds), redrive.SubjDLQList, func([]string) (any, error) {
		return redrive.ScopeRequest{Scope: *scope}, nil
	}, writeDLQs)
}

func writeDLQs(w io.Writer, ds []redrive.DLQ) error {
	return writeTable(w, "DLQ\tKIND\tOWNER\tREVIEW\tDEPTH\tOLDEST AGE\tRETENTION\t", ds, func(w io.Writer, d redrive.DLQ) {
		review := "-"
		if d.ReviewRequired {
			review = "required"
		}
		oldest := age(d.OldestAge.Round(time.Second))
		if d.ExpiryWarning {
			oldest += " (near expiry!)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t\n", d.Name, orDash(d.Kind), orDash(d.Owner), review, d.Depth, oldest, d.Retention)
	})
}

func newDLQShowCmd(g *globalOptions, scope, userCreds *string) *cobra.Command {
	var (
		f      redrive.EntryFilter
		output string
	)
	cmd := &cobra.Command{
		Use:   "show DLQ [SEQ]",
		Short: "List a DLQ's entries, or show one entry with its payload and headers",
		Long: `DLQ is the topic or queue (orders) or its DLQ stream (orders_dlq). Without SEQ,
lists entries (filter with --from, --to, --fingerprint, --entry-tenant); with SEQ,
shows that entry: reason, class, attempts, original stream/seq/subject,
consumer, group, tenant, failure times, headers and payload.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return cli.UsageError{Err: fmt.Errorf("%s: want DLQ [SEQ], got %d argument(s)", cmd.CommandPath(), len(args))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			f.DLQ, f.Scope = args[0], *scope
			if len(args) == 2 {
				seq, err := strconv.ParseUint(args[1], 10, 64)
				if err != nil || seq == 0 {
					return cli.UsageError{Err: fmt.Errorf("SEQ: want a DLQ sequence number, got %q", args[1])}
				}
				var e redrive.Entry
				if err := g.callAs(cmd.Context(), *userCreds, redrive.SubjDLQShow, redrive.ShowRequest{Scope: *scope, DLQ: f.DLQ, Seq: seq}, &e); err != nil {
					return err
				}
				return writeOutput(cmd.OutOrStdout(), output, e, writeEntry)
			}
			var es []redrive.Entry
			if err := g.callAs(cmd.Context(), *userCreds, redrive.SubjDLQEntries, f, &es); err != nil {
				return err
			}
			return writeOutput(cmd.OutOrStdout(), output, es, writeEntries)
		},
	}
	fl := cmd.Flags()
	fl.Uint64Var(&f.FromSeq, "from", 0, "first DLQ sequence")
	fl.Uint64Var(&f.ToSeq, "to", 0, "last DLQ sequence")
	fl.StringVar(&f.Fingerprint, "fingerprint", "", "only entries with this error fingerprint (see dlq groups)")
	fl.StringVar(&f.Tenant, "entry-tenant", "", "only entries whose Platform-Tenant header names this tenant")
	fl.IntVar(&f.Limit, "limit", 100, "at most N entries")
	addOutputFlag(cmd, &output)
	return cmd
}

func writeEntries(w io.Writer, es []redrive.Entry) error {
	return writeTable(w, "SEQ\tTIME\tFINGERPRINT\tCLASS\tATTEMPTS\tORIGIN\tGROUP\tTENANT\tREASON", es, func(w io.Writer, e redrive.Entry) {
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%d\t%s#%d\t%s\t%s\t%s\n", e.Seq, e.Time.UTC().Format(time.RFC3339), e.Fingerprint, e.Class, e.Attempts,
			e.Stream, e.StreamSeq, orDash(e.Group), orDash(e.Tenant), clip(e.Reason, 80))
	})
}

func writeEntry(w io.Writer, e redrive.Entry) error {
	fmt.Fprintf(w, "Entry %d (DLQ time %s)\n", e.Seq, e.Time.UTC().Format(time.RFC3339Nano))
	fmt.Fprintf(w, "  reason:       %s\n  class:        %s (fingerprint %s)\n  attempts:     %d\n", e.Reason, e.Class, e.Fingerprint, e.Attempts)
	fmt.Fprintf(w, "  original:     %s seq %d, subject %s\n  event id:     %s\n", e.Stream, e.StreamSeq, e.Subject, orDash(e.EventID))
	fmt.Fprintf(w, "  consumer:     %s (group %s)\n  tenant:       %s\n", e.Consumer, orDash(e.Group), orDash(e.Tenant))
	fmt.Fprintf(w, "  failures:     first %s, last %s\n", tfmt(e.FirstFailure), tfmt(e.LastFailure))
	if e.Redriven != "" {
		fmt.Fprintf(w, "  failed again after redrive %s\n", e.Redriven)
	}
	fmt.Fprintln(w, "Headers:")
	for _, k := range slices.Sorted(maps.Keys(e.Headers)) {
		fmt.Fprintf(w, "  %s: %s\n", k, strings.Join(e.Headers[k], ", "))
	}
	fmt.Fprintf(w, "Payload (%d bytes):\n", e.Size)
	if utf8.Valid(e.Payload) {
		fmt.Fprintf(w, "  %s\n", e.Payload)
	} else {
		fmt.Fprintf(w, "  (binary; use -o json for base64)\n")
	}
	return nil
}

func tfmt(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

func newDLQGroupsCmd(g *globalOptions, scope, userCreds *string) *cobra.Command {
	var f redrive.EntryFilter
	cmd := replyCmd(&cobra.Command{
		Use:   "groups DLQ",
		Short: "Group a DLQ's entries by error fingerprint (class + normalized reason), largest first",
		Args:  exactArgs(1, "DLQ"),
	}, g.signedBy(userCreds), redrive.SubjDLQGroups, func(args []string) (any, error) {
		f.DLQ, f.Scope = args[0], *scope
		return f, nil
	}, writeGroups)
	cmd.Flags().StringVar(&f.Tenant, "entry-tenant", "", "only entries whose Platform-Tenant header names this tenant")
	return cmd
}

func writeGroups(w io.Writer, gs []redrive.Group) error {
	return writeTable(w, "FINGERPRINT\tCOUNT\tCLASS\tFIRST SEEN\tLAST SEEN\tSEQS\tMESSAGE", gs, func(w io.Writer, g redrive.Group) {
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%d..%d\t%s\n", g.Fingerprint, g.Count, g.Class, g.FirstSeen.UTC().Format(time.RFC3339), g.LastSeen.UTC().Format(time.RFC3339), g.FirstSeq, g.LastSeq, clip(g.Message, 80))
	})
}
