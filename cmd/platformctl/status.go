package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/units"
)

func newStatusCmd(g *globalOptions) *cobra.Command {
	return listCmd(g, "status", "Show nodes, the JetStream meta leader and each stream's replica health", control.SubjStatus, writeStatus)
}

func writeStatus(w io.Writer, st control.Status) error {
	leader := st.MetaLeader
	if leader == "" {
		leader = "NONE (no quorum: streams cannot be created or changed)"
	}
	fmt.Fprintf(w, "Region %s (domain %s), answered by %s\nMeta leader: %s\n\n", st.Region, st.Domain, st.Server, leader)
	if err := writeTable(w, "NODE\tROLE\tSTATE\tLAG", st.Nodes, func(w io.Writer, n control.NodeStatus) {
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
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\n", n.Name, role, state, n.Lag)
	}); err != nil {
		return err
	}
	fmt.Fprintln(w)
	return writeTable(w, "STREAM\tKIND\tREPLICAS\tCURRENT\tLEADER\tLAGGING\tMESSAGES\tBYTES", st.Streams, func(w io.Writer, s control.StreamStatus) {
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
		leader := s.Leader
		if leader == "" {
			leader = "NONE"
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d/%d\t%s\t%s\t%d\t%s\n", s.Name, orDash(s.Kind), s.Replicas, s.Current(), s.Replicas, leader,
			orDash(strings.Join(lagging, ",")), s.Messages, units.HumanSize(s.Bytes))
	})
}
