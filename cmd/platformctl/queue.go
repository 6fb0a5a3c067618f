package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/units"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
)

func newQueueCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "queue",
		Short: "Create and list work queues (competing workers, leases, attempts)",
	}
	cmd.AddCommand(newQueueCreateCmd(g), newQueueListCmd(g), newQueueDescribeCmd(g))
	return cmd
}

func newQueueCreateCmd(g *globalOptions) *cobra.Command {
	spec := platform.DefaultQueueSpec("")
	var opts catalog.ApplyOptions
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a work queue, or update its lease and attempts (idempotent)",
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			spec.Name = args[0]
			if err := spec.Validate(); err != nil {
				return usageError{err}
			}
			return g.apply(cmd, control.SubjQueueApply, control.ApplyQueueRequest{Spec: spec, Options: opts}, opts.DryRun)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&spec.Lease, "lease", spec.Lease, "how long a worker holds a job before it comes back (AckWait)")
	f.IntVar(&spec.MaxAttempts, "max-attempts", spec.MaxAttempts, "deliveries before a job is dead-lettered")
	f.IntVar(&spec.Replicas, "replicas", spec.Replicas, "replicas of every job")
	f.StringVar(&spec.Owner, "owner", "", "team answerable for the queue and its DLQ")
	f.StringVar(&spec.Residency, "residency", "", "region the queue's jobs must never leave")
	addApplyFlags(cmd, &opts)
	return cmd
}

func newQueueListCmd(g *globalOptions) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List work queues",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var queues []catalog.QueueInfo
			if err := g.call(cmd.Context(), control.SubjQueueList, nil, &queues); err != nil {
				return err
			}
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), queues)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "QUEUE\tLEASE\tMAX ATTEMPTS\tREPLICAS\tJOBS\tBYTES\tLEADER\tOWNER\tRESIDENCY")
			for _, q := range queues {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\t%s\n", q.Spec.Name, q.Spec.Lease, q.Spec.MaxAttempts,
					replicaHealth(q.Stream.Cluster, q.Spec.Replicas), q.Stream.Messages, units.HumanSize(q.Stream.Bytes),
					orDash(q.Stream.Cluster.Leader), orDash(q.Spec.Owner), orDash(q.Spec.Residency))
			}
			return tw.Flush()
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

func newQueueDescribeCmd(g *globalOptions) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "describe NAME",
		Short: "Pending and leased jobs and the age of the oldest unfinished one",
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var st catalog.QueueStatus
			if err := g.call(cmd.Context(), control.SubjQueueDescribe, control.NameRequest{Name: args[0]}, &st); err != nil {
				return err
			}
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), st)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "Queue %s\n  subject:      %s.>\n  lease:        %s\n  max attempts: %d\n  replicas:     %s (leader %s)\n  owner:        %s\n",
				st.Spec.Name, st.Spec.Name, st.Spec.Lease, st.Spec.MaxAttempts,
				replicaHealth(st.Stream.Cluster, st.Spec.Replicas), orDash(st.Stream.Cluster.Leader), orDash(st.Spec.Owner))
			fmt.Fprintf(w, "  residency:    %s\n", orDash(st.Spec.Residency))
			fmt.Fprintf(w, "  pending:      %d\n  leased:       %d\n  redelivered:  %d\n  oldest job:   %s\n  pulls:        %d waiting\n",
				st.Pending, st.InFlight, st.Redelivered, age(st.OldestAge), st.Waiting)
			printQueueWorkers(w, st)
			return nil
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

// printQueueWorkers prints the queue's Workers instances from their
// sessions: how many jobs each holds and when it last renewed.
func printQueueWorkers(w io.Writer, st catalog.QueueStatus) {
	if st.WorkersError != "" {
		fmt.Fprintf(w, "  workers:      unknown (%s)\n", st.WorkersError)
		return
	}
	lost := 0
	for _, s := range st.Workers {
		if s.Lost {
			lost++
		}
	}
	fmt.Fprintf(w, "  workers:      %d live, %d lost\n", len(st.Workers)-lost, lost)
	if len(st.Workers) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "    WORKERS ID\tJOBS\tRENEWED\tSTATE")
	for _, s := range st.Workers {
		state := "live"
		if s.Lost {
			state = "lost: its jobs go back to live workers, or after the lease"
		}
		fmt.Fprintf(tw, "    %s\t%d\t%s ago\t%s\n", s.ID, s.Jobs, s.Silent.Round(100*time.Millisecond), state)
	}
	_ = tw.Flush()
}
