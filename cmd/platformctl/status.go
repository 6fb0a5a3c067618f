package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/units"
)

func newStatusCmd(g *globalOptions) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show nodes, the JetStream meta leader and each stream's replica health",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var st control.Status
			if err := g.call(cmd.Context(), control.SubjStatus, nil, &st); err != nil {
				return err
			}
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), st)
			}
			return writeStatus(cmd.OutOrStdout(), st)
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

func writeStatus(w io.Writer, st control.Status) error {
	leader := st.MetaLeader
	if leader == "" {
		leader = "NONE (no quorum: streams cannot be created or changed)"
	}
	fmt.Fprintf(w, "Region %s (domain %s), answered by %s\nMeta leader: %s\n\n", st.Region, st.Domain, st.Server, leader)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tROLE\tSTATE\tLAG")
	for _, n := range st.Nodes {
		role, state := "follower", "current"
		if n.Leader {
			role = "leader"
		}
		switch {
		case n.Offline:
			state = "OFFLINE"
		case !n.Current:
			state = "lagging"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", n.Name, role, state, n.Lag)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STREAM\tKIND\tREPLICAS\tCURRENT\tLEADER\tLAGGING\tMESSAGES\tBYTES")
	for _, s := range st.Streams {
		var lagging []string
		for _, p := range s.Peers {
			if !p.Current {
				state := fmt.Sprintf("%s(lag %d)", p.Name, p.Lag)
				if p.Offline {
					state = p.Name + "(offline)"
				}
				lagging = append(lagging, state)
			}
		}
		kind, leader := s.Kind, s.Leader
		if kind == "" {
			kind = "-"
		}
		if leader == "" {
			leader = "NONE"
		}
		lag := strings.Join(lagging, ",")
		if lag == "" {
			lag = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d/%d\t%s\t%s\t%d\t%s\n", s.Name, kind, s.Replicas, s.Current(), s.Replicas, leader, lag, s.Messages, units.HumanSize(s.Bytes))
	}
	return tw.Flush()
}

func addOutputFlag(cmd *cobra.Command, output *string) {
	cmd.Flags().StringVarP(output, "output", "o", "table", "output format: table or json")
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
