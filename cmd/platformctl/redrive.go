package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/internal/cli"
	"github.com/msgplatform/platform/redrive"
)

// redriveOptions are shared by the redrive subcommands.
type redriveOptions struct {
	tenant    string // scope: the tenant whose DLQs ("" the admin account)
	as        string // deprecated: the label of an unsigned request
	userCreds string // signs state-changing requests
	note      string
	output    string
	detach    bool
	interval  time.Duration
}

func newRedriveCmd(g *globalOptions) *cobra.Command {
	o := &redriveOptions{}
	cmd := &cobra.Command{
		Use:   "redrive",
		Short: "Request, approve and run redrives of DLQ entries: sample first, rate-limited, audited",
		Long: `A redrive request freezes a selection of a DLQ's entries (a sequence range, a
fingerprint, explicit sequences, or all present now), then runs: a sample is
sent first and its outcome watched; the rest follows at the requested rate
unless too many of the sample failed again, in which case the run pauses and
says why. A topic marked review: required needs another person's approval
before anything is sent.

--tenant T works on the DLQs of tenant T's topics and queues (in T's own
account; its requests and audit records are T's); without it, on the platform
admin account's.

--user-creds FILE (or PLATFORM_USER_CREDS) is your own .creds (a tenant
user's from ` + "`platformctl user add`" + `, or a platform user's): platformctl signs
every request, approval, rejection, run, pause, resume and cancel with it, and
platformd records you as the user it authenticated (alice@harbor-retail,
admin@platform), the name the web console gives too. A tenant's user acts on
its tenant's DLQs only. On a review: required DLQ the request, the approval and
the run must be signed, and the approver must be another user than the
requester. Unsigned requests still work on other DLQs; they are recorded as
unauthenticated:<--as> (--as is deprecated: it names nobody for sure).`,
	}
	userCredsFlag(cmd.PersistentFlags(), &o.userCreds)
	cmd.PersistentFlags().StringVar(&o.as, "as", actor(), "label of an unsigned request (deprecated: use --user-creds)")
	_ = cmd.PersistentFlags().MarkDeprecated("as", "sign with --user-creds FILE instead; --as is recorded as unauthenticated:<name>")
	cmd.PersistentFlags().StringVar(&o.tenant, "tenant", "", "the tenant whose DLQs (default: the platform admin account's)")
	cmd.AddCommand(newRedriveRequestCmd(g, o),
		newRedriveActionCmd(g, o, "approve", redrive.SubjApprove, "Approve a request (review: required topics: not by its requester)", false),
		newRedriveActionCmd(g, o, "reject", redrive.SubjReject, "Reject a request", false),
		newRedriveRunCmd(g, o),
		newRedriveActionCmd(g, o, "pause", redrive.SubjPause, "Pause a running redrive (takes effect within a checkpoint)", false),
		newRedriveActionCmd(g, o, "resume", redrive.SubjResume, "Resume a paused redrive from where it stopped", true),
		newRedriveActionCmd(g, o, "cancel", redrive.SubjCancel, "Cancel a redrive that has not finished", false),
		newRedriveStatusCmd(g, o), newRedriveHistoryCmd(g, o))
	return cmd
}

func newRedriveRequestCmd(g *globalOptions, o *redriveOptions) *cobra.Command {
	var (
		r      redrive.Request
		seqs   string
		dryRun bool
	)
	cmd := &cobra.Command{
		Use:   "request DLQ --all|--from N [--to M]|--fingerprint FP|--seqs 1,2,3 --reason WHY",
		Short: "Request a redrive (the selection is frozen now); --dry-run shows what would be sent",
		Args:  exactArgs(1, "DLQ"),
		RunE: func(cmd *cobra.Command, args []string) error {
			r.DLQ, r.Requester, r.Scope = args[0], o.as, o.tenant
			if seqs != "" {
				for _, s := range strings.Split(seqs, ",") {
					n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
					if err != nil {
						return cli.UsageError{Err: fmt.Errorf("--seqs: want comma-separated DLQ sequences, got %q", s)}
					}
					r.Selection.Seqs = append(r.Selection.Seqs, n)
				}
			}
			if err := r.Validate(); err != nil {
				return cli.UsageError{Err: err}
			}
			if dryRun {
				var p redrive.Preview
				if err := g.callAs(cmd.Context(), o.userCreds, redrive.SubjPreview, r, &p); err != nil {
					return err
				}
				return writeOutput(cmd.OutOrStdout(), o.output, p, writePreview)
			}
			var st redrive.Status
			if err := g.callAs(cmd.Context(), o.userCreds, redrive.SubjRequest, r, &st); err != nil {
				return err
			}
			return writeOutput(cmd.OutOrStdout(), o.output, st, writeRequested)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&r.Selection.All, "all", false, "every entry present now")
	f.Uint64Var(&r.Selection.FromSeq, "from", 0, "first DLQ sequence")
	f.Uint64Var(&r.Selection.ToSeq, "to", 0, "last DLQ sequence (default: the last present now)")
	f.StringVar(&r.Selection.Fingerprint, "fingerprint", "", "entries with this error fingerprint (see dlq groups)")
	f.StringVar(&seqs, "seqs", "", "explicit DLQ sequences, comma-separated")
	f.StringVar(&r.Destination, "destination", "", "subject to publish to (default: each entry's original subject)")
	f.Float64Var(&r.Rate, "rate", 100, "events per second (0: unlimited)")
	f.IntVar(&r.SampleSize, "sample", 10, "events sent first, whose outcome decides whether the rest follows (0: none)")
	f.DurationVar(&r.SampleWindow, "sample-window", redrive.DefaultSampleWindow, "how long to watch the sample's outcome (cover the consumers' retries)")
	f.Float64Var(&r.MaxFailureRate, "max-failure-rate", 0, "share of redriven events allowed to fail again before the run pauses itself (0..1)")
	f.StringVar(&r.Reason, "reason", "", "why (required; recorded in the audit log)")
	f.BoolVar(&dryRun, "dry-run", false, "show what would be sent, grouped by fingerprint; store and send nothing")
	addOutputFlag(cmd, &o.output)
	return cmd
}

// writeRequested reports a request just made and who may run it.
func writeRequested(w io.Writer, st redrive.Status) error {
	fmt.Fprintf(w, "requested %s: %d entries of DLQ %s", st.ID, st.Total, st.Object)
	if st.Excluded > 0 {
		fmt.Fprintf(w, " (%d more matched but have no original subject)", st.Excluded)
	}
	fmt.Fprintln(w)
	if st.ReviewRequired {
		fmt.Fprintf(w, "%s is marked review: required: someone other than %s must run `platformctl redrive approve %s --user-creds THEIR.creds`\n", st.Object, st.Requester, st.ID)
	} else {
		fmt.Fprintf(w, "no review required: run it with `platformctl redrive run %s`\n", st.ID)
	}
	return nil
}

func writePreview(w io.Writer, p redrive.Preview) error {
	verb := "dry run: would redrive"
	if p.ID != "" {
		verb = "dry run of " + p.ID + ": would redrive"
	}
	fmt.Fprintf(w, "%s %d entries of DLQ %s (seqs %d..%d)", verb, p.Total, p.DLQ, p.FirstSeq, p.LastSeq)
	if p.Gone > 0 {
		fmt.Fprintf(w, "; %d frozen entries are gone", p.Gone)
	}
	if p.Excluded > 0 {
		fmt.Fprintf(w, "; %d have no original subject", p.Excluded)
	}
	fmt.Fprintln(w)
	if p.ReviewRequired {
		fmt.Fprintln(w, "review: required (another person must approve)")
	}
	if p.Total > 0 {
		rate := "unlimited rate"
		if p.Rate > 0 {
			rate = fmt.Sprintf("%.0f/s", p.Rate)
		}
		fmt.Fprintf(w, "at %s, sample %d: about %s\n", rate, p.SampleSize, p.Duration.Round(time.Second))
	}
	if err := writeGroups(w, p.Groups); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DESTINATION\tEVENTS")
	for _, d := range p.Destinations {
		fmt.Fprintf(tw, "%s\t%d\n", d.Subject, d.Count)
	}
	return tw.Flush()
}

func newRedriveActionCmd(g *globalOptions, o *redriveOptions, verb, subject, short string, follows bool) *cobra.Command {
	cmd := &cobra.Command{
		Use:   verb + " ID",
		Short: short,
		Args:  exactArgs(1, "ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var st redrive.Status
			if err := g.callAs(cmd.Context(), o.userCreds, subject, redrive.Action{Scope: o.tenant, ID: args[0], Actor: o.as, Note: o.note}, &st); err != nil {
				return err
			}
			if o.output == "json" && !follows {
				return writeJSON(cmd.OutOrStdout(), st)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", st.ID, st.State)
			if follows && !o.detach {
				return g.follow(cmd.Context(), cmd.OutOrStdout(), o.tenant, st.ID, st.Revision, o.interval)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&o.note, "note", "", "why (recorded in the audit log)")
	if follows {
		addFollowFlags(cmd, o)
	} else {
		addOutputFlag(cmd, &o.output)
	}
	return cmd
}

func addFollowFlags(cmd *cobra.Command, o *redriveOptions) {
	cmd.Flags().BoolVar(&o.detach, "detach", false, "return at once instead of printing progress until it stops")
	cmd.Flags().DurationVar(&o.interval, "interval", time.Second, "progress interval")
}

func newRedriveRunCmd(g *globalOptions, o *redriveOptions) *cobra.Command {
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "run ID",
		Short: "Run a request (approved, or needing no review); prints progress until it stops",
		Args:  exactArgs(1, "ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dryRun {
				var p redrive.Preview
				if err := g.callAs(cmd.Context(), o.userCreds, redrive.SubjDryRun, redrive.IDRequest{Scope: o.tenant, ID: args[0]}, &p); err != nil {
					return err
				}
				return writePreview(cmd.OutOrStdout(), p)
			}
			var st redrive.Status
			if err := g.callAs(cmd.Context(), o.userCreds, redrive.SubjRun, redrive.Action{Scope: o.tenant, ID: args[0], Actor: o.as, Note: o.note}, &st); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: running (%d entries, rate %s, sample %d)\n", st.ID, st.Total, rateText(st.Request.Rate), st.SampleSize)
			if o.detach {
				return nil
			}
			return g.follow(cmd.Context(), cmd.OutOrStdout(), o.tenant, st.ID, st.Revision, o.interval)
		},
	}
	cmd.Flags().StringVar(&o.note, "note", "", "why (recorded in the audit log)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "show what the run would send now, grouped by fingerprint; send nothing")
	addFollowFlags(cmd, o)
	return cmd
}

func rateText(r float64) string {
	if r <= 0 {
		return "unlimited"
	}
	return fmt.Sprintf("%.0f/s", r)
}

// follow prints a redrive's progress until it is no longer running.
// since is the record's revision after the caller's own change (its run
// or resume): the bucket's replicas answer reads too, and one that has
// not applied that change yet returns an older record (e.g. "approved"
// right after the run started, which would end the follow at once). Such
// a read is not progress: it is asked again.
func (g *globalOptions) follow(ctx context.Context, w io.Writer, scope, id string, since uint64, every time.Duration) error {
	if every <= 0 {
		every = time.Second
	}
	for {
		var st redrive.Status
		if err := g.call(ctx, redrive.SubjStatus, redrive.IDRequest{Scope: scope, ID: id}, &st); err != nil {
			return err
		}
		if st.Revision < since {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(staleReadWait):
			}
			continue
		}
		fmt.Fprintln(w, progressLine(st))
		if st.State != redrive.StateRunning {
			if st.State == redrive.StatePaused {
				fmt.Fprintf(w, "paused: %s\n", st.PauseReason)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
	}
}

// staleReadWait is the pause before reading a redrive's record again
// when a replica answered with a revision older than the caller's own.
const staleReadWait = 50 * time.Millisecond

func progressLine(st redrive.Status) string {
	p := st.Progress
	s := fmt.Sprintf("%s %s", st.ID, st.State)
	if p.Phase != "" && st.State == redrive.StateRunning {
		s += " (" + p.Phase + ")"
	}
	s += fmt.Sprintf(": %d/%d done, %d sent, %d skipped, %d failed again, %.1f/s", p.Next, st.Total, p.Sent, p.Skipped, p.Refailed, st.Rate)
	if st.ETA > 0 {
		s += ", ETA " + st.ETA.String()
	}
	return s
}

func newRedriveStatusCmd(g *globalOptions, o *redriveOptions) *cobra.Command {
	var f redrive.ListFilter
	cmd := &cobra.Command{
		Use:   "status [ID]",
		Short: "Show one redrive (state, who, progress, rate, ETA), or list them",
		Args:  optionalID,
		RunE: func(cmd *cobra.Command, args []string) error {
			w := cmd.OutOrStdout()
			if len(args) == 1 {
				var st redrive.Status
				if err := g.callAs(cmd.Context(), o.userCreds, redrive.SubjStatus, redrive.IDRequest{Scope: o.tenant, ID: args[0]}, &st); err != nil {
					return err
				}
				return writeOutput(w, o.output, st, writeRedrive)
			}
			var sts []redrive.Status
			f.Scope = o.tenant
			if err := g.callAs(cmd.Context(), o.userCreds, redrive.SubjList, f, &sts); err != nil {
				return err
			}
			return writeOutput(w, o.output, sts, writeRedrives)
		},
	}
	cmd.Flags().StringVar(&f.DLQ, "dlq", "", "only this DLQ's requests")
	cmd.Flags().StringVar((*string)(&f.State), "state", "", "only requests in this state")
	addOutputFlag(cmd, &o.output)
	return cmd
}

func writeRedrives(w io.Writer, sts []redrive.Status) error {
	return writeTable(w, "ID\tDLQ\tSTATE\tREQUESTER\tAPPROVER\tDONE\tSENT\tFAILED AGAIN\tREASON", sts, func(w io.Writer, st redrive.Status) {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%d\t%d\t%s\n", st.ID, st.Object, st.State, st.Requester, orDash(st.ApprovedBy),
			st.Progress.Next, st.Total, st.Progress.Sent, st.Progress.Refailed, clip(st.Reason, 60))
	})
}

// optionalID is the Args of a command taking an optional ID.
func optionalID(cmd *cobra.Command, args []string) error {
	if len(args) > 1 {
		return cli.UsageError{Err: fmt.Errorf("%s: want [ID], got %d arguments", cmd.CommandPath(), len(args))}
	}
	return nil
}

func writeRedrive(w io.Writer, st redrive.Status) error {
	fmt.Fprintf(w, "Redrive %s: %s\n", st.ID, st.State)
	fmt.Fprintf(w, "  dlq:          %s (%s, owner %s)\n", st.Object, st.DLQStream, orDash(st.Owner))
	fmt.Fprintf(w, "  selection:    %d entries frozen at request time\n", st.Total)
	fmt.Fprintf(w, "  destination:  %s\n", orText(st.Destination, "original subjects"))
	fmt.Fprintf(w, "  rate:         %s, sample %d watched %s, max failure rate %.1f%%\n", rateText(st.Request.Rate), st.SampleSize, orDur(st.SampleWindow), 100*st.MaxFailureRate)
	fmt.Fprintf(w, "  requester:    %s: %s\n", st.Requester, st.Reason)
	review := "not required"
	if st.ReviewRequired {
		review = "required"
	}
	fmt.Fprintf(w, "  review:       %s; approved by %s\n", review, orDash(st.ApprovedBy))
	fmt.Fprintf(w, "  progress:     %s\n", progressLine(st))
	if st.PauseReason != "" {
		fmt.Fprintf(w, "  paused:       %s\n", st.PauseReason)
	}
	if st.Progress.FirstRefailure != "" {
		fmt.Fprintf(w, "  first re-failure: %s\n", st.Progress.FirstRefailure)
	}
	fmt.Fprintln(w, "Steps:")
	for _, s := range st.Steps {
		fmt.Fprintf(w, "  %s  %-10s -> %-10s by %s  %s\n", s.Time.UTC().Format(time.RFC3339), orDash(string(s.From)), s.To, s.Actor, s.Note)
	}
	return nil
}

func orText(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func orDur(d time.Duration) string {
	if d == 0 {
		return redrive.DefaultSampleWindow.String()
	}
	return d.String()
}

func newRedriveHistoryCmd(g *globalOptions, o *redriveOptions) *cobra.Command {
	var f redrive.HistoryFilter
	var links bool
	cmd := &cobra.Command{
		Use:   "history [ID]",
		Short: "The audit log of redrives: who requested, approved, ran, paused; outcomes; DLQ seq → message id links",
		Args:  optionalID,
		RunE: func(cmd *cobra.Command, args []string) error {
			if links && o.output == "json" {
				return cli.UsageError{Err: fmt.Errorf("%s: --links is a text view; -o json already holds every link (the redrive.sent records' after)", cmd.CommandPath())}
			}
			if len(args) == 1 {
				f.ID = args[0]
			}
			var rs []redrive.AuditRecord
			f.Scope = o.tenant
			if err := g.callAs(cmd.Context(), o.userCreds, redrive.SubjHistory, f, &rs); err != nil {
				return err
			}
			if o.output == "json" {
				return writeJSON(cmd.OutOrStdout(), rs)
			}
			if links {
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				// One row per redriven event, from the redrive.sent
				// records shown (either encoding).
				fmt.Fprintln(tw, "REQUEST\tDLQ SEQ\tMSG ID\tSTREAM\tSEQ\tSUBJECT\tORIGINAL ID\tDUPLICATE")
				for _, r := range rs {
					ls, err := r.Links()
					if err != nil {
						return fmt.Errorf("audit record %d: %w", r.Seq, err)
					}
					for _, l := range ls {
						fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%s\t%s\t%t\n", r.Target, l.DLQSeq, l.MsgID, l.Stream, l.Seq, l.Subject, orDash(l.OriginalID), l.Duplicate)
					}
				}
				return tw.Flush()
			}
			return writeTable(cmd.OutOrStdout(), "SEQ\tTIME\tREQUEST\tACTION\tACTOR\tDETAIL", rs, func(w io.Writer, r redrive.AuditRecord) {
				fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\n", r.Seq, r.Time.UTC().Format(time.RFC3339), r.Target, r.Action, r.Actor, orDash(r.Detail))
			})
		},
	}
	cmd.Flags().IntVar(&f.Limit, "limit", 200, "show the last N records")
	cmd.Flags().BoolVar(&links, "links", false, "list every redriven event: DLQ seq, message id, stream and seq (text output)")
	addOutputFlag(cmd, &o.output)
	return cmd
}
