package main

import (
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/platform"
)

func newRegionCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "region",
		Short: "Regions (each its own cluster and JetStream domain) and mirroring between them",
	}
	cmd.AddCommand(newRegionListCmd(g), newRegionMirrorCmd(g), newRegionMirrorsCmd(g))
	return cmd
}

func newRegionListCmd(g *globalOptions) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the regions and whether each answers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var rs []platform.RegionInfo
			if err := g.call(cmd.Context(), platform.SubjRegionList, nil, &rs); err != nil {
				return err
			}
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), rs)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "REGION\tDOMAIN\tHOME\tSTREAMS\tERROR")
			for _, r := range rs {
				home := ""
				if r.Home {
					home = "yes"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", r.Name, r.Domain, orDash(home), r.Streams, orDash(r.Error))
			}
			return tw.Flush()
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

func newRegionMirrorCmd(g *globalOptions) *cobra.Command {
	var req platform.MirrorRequest
	var output string
	cmd := &cobra.Command{
		Use:   "mirror TOPIC --to REGION",
		Short: "Mirror a non-resident topic to another region (asynchronous; refused for resident topics)",
		Long: `Creates, in REGION, a mirror of TOPIC: a stream of the same name that
JetStream keeps in step asynchronously over the region link, with the
origin's sequence numbers. Running it again changes nothing. A topic with a
residency (and its dead-letter streams) never leaves its region: the request
is refused with the reason, and nothing is created.`,
		Args: exactArgs(1, "TOPIC"),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Topic = args[0]
			if req.To == "" {
				return usageError{errors.New("--to: name the region to mirror to, e.g. --to us")}
			}
			var st platform.MirrorStatus
			if err := g.call(cmd.Context(), platform.SubjRegionMirror, req, &st); err != nil {
				return err
			}
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), st)
			}
			verb := "mirror exists"
			if st.Created {
				verb = "created mirror"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s of topic %s: %s -> %s (stream %s)\n", verb, st.Topic, st.From, st.To, st.Stream)
			return writeMirrors(cmd.OutOrStdout(), []platform.MirrorStatus{st})
		},
	}
	cmd.Flags().StringVar(&req.To, "to", "", "region to mirror to (required)")
	cmd.Flags().StringVar(&req.From, "from", "", "region the topic lives in (default: found)")
	cmd.Flags().IntVar(&req.Replicas, "replicas", 0, "replicas of the mirror (default: the topic's)")
	addOutputFlag(cmd, &output)
	return cmd
}

func newRegionMirrorsCmd(g *globalOptions) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "mirrors",
		Short: "List every mirror and its lag in events and seconds",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var ms []platform.MirrorStatus
			if err := g.call(cmd.Context(), platform.SubjRegionMirrors, nil, &ms); err != nil {
				return err
			}
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), ms)
			}
			return writeMirrors(cmd.OutOrStdout(), ms)
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

func writeMirrors(w io.Writer, ms []platform.MirrorStatus) error {
	if len(ms) == 0 {
		fmt.Fprintln(w, "No mirrors.")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tFROM\tTO\tMESSAGES\tLAST SEQ\tORIGIN SEQ\tLAG (EVENTS)\tLAG\tERROR")
	for _, m := range ms {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\n", m.Topic, m.From, m.To, m.Messages, m.LastSeq, m.OriginLastSeq,
			m.LagMessages, age(time.Duration(m.LagSeconds*float64(time.Second))), orDash(m.Error))
	}
	return tw.Flush()
}

// writeTopicMirrors adds the mirrors of a topic to `topic describe` (in
// mode regions; nothing otherwise, or from an older platformd).
func writeTopicMirrors(cmd *cobra.Command, g *globalOptions, topic string) {
	var ms []platform.MirrorStatus
	if err := g.call(cmd.Context(), platform.SubjRegionTopicMirrors, control.NameRequest{Name: topic}, &ms); err != nil || len(ms) == 0 {
		return
	}
	fmt.Fprintln(cmd.OutOrStdout())
	_ = writeMirrors(cmd.OutOrStdout(), ms)
}
