package main

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/internal/cli"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/redrive"
)

func newGroupResetCmd(g *globalOptions) *cobra.Command {
	var (
		req    catalog.GroupResetRequest
		toTime string
		output string
		review resetReviewFlags
	)
	cmd := &cobra.Command{
		Use:   "reset GROUP --to-time T|--to-start|--to-end [--dry-run | --reason WHY [--request]] | reset --approve|--execute|--show ID",
		Short: "Move a group's position on every partition (replay by time); other groups are untouched",
		Long: `Moves the group GROUP to the first event at or after a time (--to-time, RFC 3339
such as 2026-03-01T12:00:00Z, or a duration ago such as 2h), to the oldest
event still stored (--to-start), or past every stored event (--to-end), on
every partition of its topic. Events from the new position are processed
again (at-least-once: the group's inbox catches repeats). --dry-run prints,
per partition, the current and new positions and the events to process, and
an estimated drain time: events / (consume rate - arrival rate), measured
over --rate-window unless --consume-rate / --arrival-rate are given.

A topic marked review: required refuses a direct reset (a dry run still
works). Reset it through a request, as with redrive:

  platformctl group reset GROUP --to-time 2h --request --reason WHY --user-creds alice.creds  # prints ID
  platformctl group reset --approve ID --user-creds bob.creds  # another user than the requester
  platformctl group reset --execute ID --user-creds bob.creds  # runs once; the approval is used up
  platformctl group reset --show ID

--request, --approve and --execute must be signed with your own .creds
(--user-creds FILE, or PLATFORM_USER_CREDS: a platform user's): platformd
records the user it authenticated (alice@platform), and refuses an approval by
the requester. Every reset but a dry run needs --reason; resets, requests,
approvals and executions (with every partition's position before and after)
are appended to the audit stream. A direct reset may be unsigned: it is then
recorded as unauthenticated:<--as> (--as is deprecated).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if review.id() != "" {
				return exactArgs(0, "no GROUP with --approve, --execute or --show")(cmd, args)
			}
			return exactArgs(1, "GROUP")(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := review.validate(); err != nil {
				return cli.UsageError{Err: err}
			}
			if review.id() != "" {
				return review.decide(cmd, g, output)
			}
			req.Group = args[0]
			if toTime != "" {
				t, err := parseResetTime(toTime, time.Now())
				if err != nil {
					return cli.UsageError{Err: err}
				}
				req.ToTime = &t
			}
			if err := req.Validate(); err != nil {
				return cli.UsageError{Err: err}
			}
			if review.request {
				return review.submit(cmd, g, req, output)
			}
			if err := g.extendTimeout(req.RateWindow); err != nil {
				return err
			}
			if !req.DryRun && review.reason == "" {
				return cli.UsageError{Err: errors.New("--reason is required: every reset is audited with who (--user-creds) and why")}
			}
			var out catalog.GroupReset
			if err := g.callAs(cmd.Context(), review.userCreds, redrive.SubjResetRun, redrive.ResetRequestBody{Reset: req, By: review.as, Reason: review.reason}, &out); err != nil {
				return err
			}
			return writeOutput(cmd.OutOrStdout(), output, out, writeGroupReset)
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Topic, "topic", "", "the group's topic (default: found from the group)")
	f.StringVar(&toTime, "to-time", "", "first event at or after this time (RFC 3339, or a duration ago such as 2h)")
	f.BoolVar(&req.ToStart, "to-start", false, "the oldest event still stored")
	f.BoolVar(&req.ToEnd, "to-end", false, "past every stored event (skip the backlog)")
	f.BoolVar(&req.DryRun, "dry-run", false, "print the positions and events to process; change nothing")
	f.Float64Var(&req.ConsumeRate, "consume-rate", 0, "events/s the group processes (0: measure)")
	f.Float64Var(&req.ArrivalRate, "arrival-rate", 0, "events/s arriving on the topic (0: measure)")
	f.DurationVar(&req.RateWindow, "rate-window", 3*time.Second, "how long to measure the rates (0: do not)")
	review.bind(cmd)
	addOutputFlag(cmd, &output)
	return cmd
}

// extendTimeout adds the rate sampling window to --timeout.
func (g *globalOptions) extendTimeout(window time.Duration) error {
	d, err := g.requestTimeout()
	if err != nil {
		return err
	}
	g.timeout = (d + window).String()
	return nil
}

// parseResetTime reads RFC 3339 or a duration before now.
func parseResetTime(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(strings.TrimPrefix(s, "-")); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("--to-time: want RFC 3339 (2026-03-01T12:00:00Z) or a duration ago (2h), got %q", s)
}

func writeGroupReset(w io.Writer, r catalog.GroupReset) error {
	verb := "reset"
	if r.DryRun {
		verb = "dry run: would reset"
	}
	fmt.Fprintf(w, "%s group %s on topic %s to %s\n", verb, r.Group, r.Topic, r.Target)
	if r.ReviewRequired {
		fmt.Fprintln(w, "  topic is marked review: required: applying needs an approved request")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "PARTITION\tCONSUMER\tCURRENT SEQ\tPENDING\tNEW SEQ\tTO PROCESS\t")
	for _, p := range r.Partitions {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%d\t%d\t\n", p.Partition, p.Consumer, p.CurrentSeq, p.Pending, p.NewSeq, p.ToProcess)
	}
	tw.Flush()
	fmt.Fprintf(w, "events: %d pending before, %d to process after\n", r.Pending, r.ToProcess)
	how := "given"
	if r.RatesMeasured {
		how = "measured"
	}
	switch {
	case r.ConsumeRate == 0 && r.ArrivalRate == 0:
		fmt.Fprintln(w, "drain: no rates (pass --consume-rate and --arrival-rate, or --rate-window)")
	case r.Drains:
		fmt.Fprintf(w, "drain: %d events at %.0f/s consumed against %.0f/s arriving (%s) ≈ %s\n", r.ToProcess, r.ConsumeRate, r.ArrivalRate, how, r.DrainTime.Round(time.Second))
	default:
		fmt.Fprintf(w, "drain: never: %.0f/s consumed against %.0f/s arriving (%s)\n", r.ConsumeRate, r.ArrivalRate, how)
	}
	if r.Note != "" {
		fmt.Fprintf(w, "note: %s\n", r.Note)
	}
	return nil
}
