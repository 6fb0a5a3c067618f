package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/internal/cli"
	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/platform/region"
)

func newRegionCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "region",
		Short: "Regions (each its own cluster and JetStream domain) and mirroring between them",
		Long: `Regions (each its own cluster and JetStream domain) and mirroring,
failover and failback between them. Served by platformd in mode regions
(every region in one process) and by every mode-node platformd whose
configuration names the other regions in regions.peers (their client URLs,
reached directly, never through the leafnode link); any node of any region
answers for all of them.`,
	}
	cmd.AddCommand(newRegionListCmd(g), newRegionMirrorCmd(g), newRegionMirrorsCmd(g), newRegionFailoverCmd(g), newRegionFailbackCmd(g))
	return cmd
}

func newRegionListCmd(g *globalOptions) *cobra.Command {
	return listCmd(g, "list", "List the regions and whether each answers", region.SubjList, writeRegions)
}

func writeRegions(w io.Writer, rs []region.Info) error {
	return writeTable(w, "REGION\tDOMAIN\tHOME\tSTREAMS\tERROR", rs, func(w io.Writer, r region.Info) {
		home := ""
		if r.Home {
			home = "yes"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\n", r.Name, r.Domain, orDash(home), r.Streams, orDash(r.Error))
	})
}

func newRegionMirrorCmd(g *globalOptions) *cobra.Command {
	var req region.MirrorRequest
	cmd := replyCmd(&cobra.Command{
		Use:   "mirror TOPIC --to REGION",
		Short: "Mirror a non-resident topic to another region (asynchronous; refused for resident topics)",
		Long: `Creates, in REGION, a mirror of TOPIC: a stream of the same name that
JetStream keeps in step asynchronously over the region link, with the
origin's sequence numbers. Running it again changes nothing. A topic with a
residency (and its dead-letter streams) never leaves its region: the request
is refused with the reason, and nothing is created.`,
		Args: exactArgs(1, "TOPIC"),
	}, g.call, region.SubjMirror, func(args []string) (any, error) {
		req.Topic = args[0]
		return req, requireTo(req.To, "mirror to")
	}, writeMirror)
	cmd.Flags().StringVar(&req.To, "to", "", "region to mirror to (required)")
	cmd.Flags().StringVar(&req.From, "from", "", "region the topic lives in (default: found)")
	cmd.Flags().IntVar(&req.Replicas, "replicas", 0, "replicas of the mirror (default: the topic's)")
	return cmd
}

// writeMirror reports the mirror `region mirror` made or found.
func writeMirror(w io.Writer, st region.MirrorStatus) error {
	verb := "mirror exists"
	if st.Created {
		verb = "created mirror"
	}
	fmt.Fprintf(w, "%s of topic %s: %s -> %s (stream %s)\n", verb, st.Topic, st.From, st.To, st.Stream)
	return writeMirrors(w, []region.MirrorStatus{st})
}

func newRegionMirrorsCmd(g *globalOptions) *cobra.Command {
	return listCmd(g, "mirrors", "List every mirror and its lag in events and seconds", region.SubjMirrors, writeMirrors)
}

func writeMirrors(w io.Writer, ms []region.MirrorStatus) error {
	if len(ms) == 0 {
		fmt.Fprintln(w, "No mirrors.")
		return nil
	}
	return writeTable(w, "TOPIC\tFROM\tTO\tMESSAGES\tLAST SEQ\tORIGIN SEQ\tLAG (EVENTS)\tLAG\tERROR", ms, func(w io.Writer, m region.MirrorStatus) {
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", m.Topic, m.From, m.To, m.Messages, m.LastSeq, m.OriginLastSeq,
			m.LagMessages, age(time.Duration(m.LagSeconds*float64(time.Second))), orDash(m.Error))
	})
}

// writeTopicMirrors adds the mirrors of a topic to `topic describe` (in
// mode regions; nothing otherwise, or from an older platformd).
func writeTopicMirrors(cmd *cobra.Command, g *globalOptions, topic string) {
	var ms []region.MirrorStatus
	if err := g.call(cmd.Context(), region.SubjTopicMirrors, control.NameRequest{Name: topic}, &ms); err != nil || len(ms) == 0 {
		return
	}
	fmt.Fprintln(cmd.OutOrStdout())
	_ = writeMirrors(cmd.OutOrStdout(), ms)
}

func newRegionFailoverCmd(g *globalOptions) *cobra.Command {
	var req region.FailoverRequest
	cmd := &cobra.Command{
		Use:   "failover TOPIC --to REGION",
		Short: "Promote a topic's mirror in REGION to primary and move its consumer groups there",
		Long: `Promotes the mirror of TOPIC in REGION to the topic's primary stream and
recreates the topic's consumer groups there at their translated positions.

First it reports how far the mirror was behind: the last origin sequence it
saw, the events it lacks and their age. When the origin answers (a planned
failover) the mirror is given --catch-up to reach it; when the origin is
gone, the events it lacks stay there and failback keeps them.

Mirrors keep the origin's sequence numbers, so each group resumes at the
same sequence: from the origin's live positions, else from the positions
platformd records every few seconds in the target region, else (a group
named with --group and nothing recorded) from the first event at or after
the group's last known ack time. The report states the duplicate window:
events between each new position and the promotion point, which consumers
may already have processed and must absorb (inbox dedupe by event id).

Resident topics cannot fail over: their events never leave their region,
so there is no copy to promote. The command refuses and offers degrade
mode: the topic stays in its home region; while that region is down
producers keep writing to their transactional outbox (outboxrelay), which
holds the events and retries until the home region returns, and consumers
resume from their positions there. Nothing is lost; delivery is late by
the outage.

Undo with 'platformctl region failback TOPIC' once the original region is
back.`,
		Args: exactArgs(1, "TOPIC"),
	}
	replyCmd(cmd, g.callLong(cmd, region.OpTimeout), region.SubjFailover, func(args []string) (any, error) {
		req.Topic = args[0]
		return req, requireTo(req.To, "fail over to")
	}, writeFailover)
	cmd.Flags().StringVar(&req.To, "to", "", "region holding the mirror to promote (required)")
	cmd.Flags().StringSliceVar(&req.Groups, "group", nil, "consumer group to recreate even without a recorded position (repeatable)")
	cmd.Flags().DurationVar(&req.CatchUp, "catch-up", 0, "how long to let the mirror catch up when the origin answers (default 10s; negative: do not wait)")
	cmd.Flags().BoolVar(&req.DryRun, "dry-run", false, "report the lag and the group positions; change nothing")
	return cmd
}

// requireTo is the usage error of a region command run without --to.
func requireTo(to, verb string) error {
	if to == "" {
		return cli.UsageError{Err: fmt.Errorf("--to: name the region to %s, e.g. --to us", verb)}
	}
	return nil
}

func writeFailover(w io.Writer, f region.Failover) error {
	verb := "failed over"
	if f.DryRun {
		verb = "would fail over (dry run)"
	}
	fmt.Fprintf(w, "topic %s %s: %s -> %s\n", f.Topic, verb, f.From, f.To)
	origin := "answers"
	if !f.OriginReachable {
		origin = "does not answer: " + f.OriginError
	}
	fmt.Fprintf(w, "origin %s %s\n", f.From, origin)
	fmt.Fprintf(w, "mirror behind: %d events, %s (last origin seq seen %d, mirror last seq %d, last contact %s ago)\n",
		f.LagEvents, age(time.Duration(f.LagSeconds*float64(time.Second))), f.LastOriginSeq, f.MirrorLastSeq, age(f.LastContact))
	fmt.Fprintf(w, "promoted at seq %d; events not replicated (kept in %s, restored by failback): %d\n", f.PromotedAtSeq, f.From, f.Unreplicated)
	fmt.Fprintf(w, "duplicate window consumers must absorb: %d events\n", f.DuplicateWindow)
	if len(f.Groups) > 0 {
		if err := writeTable(w, "GROUP\tPARTITION\tSOURCE\tACK FLOOR\tSTART SEQ\tDUPLICATES", f.Groups, func(w io.Writer, g region.FailoverGroup) {
			for _, p := range g.Partitions {
				fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%d\t%d\n", g.Group, p.Partition, p.Source, p.AckFloor, p.StartSeq, p.Duplicates)
			}
		}); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(w, "No consumer groups recorded for this topic.")
	}
	for _, n := range f.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	return nil
}

func newRegionFailbackCmd(g *globalOptions) *cobra.Command {
	var req region.FailbackRequest
	cmd := &cobra.Command{
		Use:   "failback TOPIC",
		Short: "Return a failed-over topic to its original region, keeping every event written during the outage",
		Long: `Run once the region TOPIC failed over from answers again. In order:
the promoted stream stops taking writes (producers still writing there reach
the original region over the link); every event written during the outage
whose event id (Nats-Msg-Id) the original region lacks is copied back with
the same id, subject and headers (ids already there are skipped); each
consumer group's position is translated back (an event a group may have
processed is replayed, never skipped); then the promoted stream is replaced
by a fresh mirror of the original, which is primary again. Nothing is
deleted before its events are in the original region; an interrupted
failback can be run again.`,
		Args: exactArgs(1, "TOPIC"),
	}
	replyCmd(cmd, g.callLong(cmd, region.OpTimeout), region.SubjFailback, func(args []string) (any, error) {
		req.Topic = args[0]
		return req, nil
	}, writeFailback)
	cmd.Flags().StringVar(&req.From, "from", "", "region currently primary (default: found)")
	return cmd
}

func writeFailback(w io.Writer, out region.Failback) error {
	fmt.Fprintf(w, "topic %s failed back: %s -> %s (primary again)\n", out.Topic, out.From, out.To)
	fmt.Fprintf(w, "events written in %s after seq %d: %d; copied back: %d; already there (same event id): %d; kept in %s only: %d\n",
		out.From, out.PromotedAtSeq, out.Scanned, out.Copied, out.Deduplicated, out.To, out.OriginOnly)
	if len(out.Groups) > 0 {
		header := fmt.Sprintf("GROUP\tPARTITION\tACK FLOOR IN %s\tSTART SEQ IN %s\tTO PROCESS", out.From, out.To)
		if err := writeTable(w, header, out.Groups, func(w io.Writer, g region.FailbackGroup) {
			fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\n", g.Group, g.Partition, g.FromAckFloor, g.StartSeq, g.ToProcess)
		}); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "mirroring resumed: %s -> %s\n", out.To, out.From)
	for _, n := range out.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	return nil
}
