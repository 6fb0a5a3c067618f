package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/internal/cli"
	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/units"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
)

func newQueueCmd(g *globalOptions) *cobra.Command {
	return parentCmd("queue", "Create and list work queues (competing workers, leases, attempts)",
		newQueueCreateCmd(g), newQueueListCmd(g), newQueueDescribeCmd(g))
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
				return cli.UsageError{Err: err}
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
	return listCmd(g, "list", "List work queues", control.SubjQueueList, writeQueues)
}

func writeQueues(w io.Writer, queues []catalog.QueueInfo) error {
	return writeTable(w, "QUEUE\tLEASE\tMAX ATTEMPTS\tREPLICAS\tJOBS\tBYTES\tLEADER\tOWNER\tRESIDENCY", queues, func(w io.Writer, q catalog.QueueInfo) {
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\t%s\n", q.Spec.Name, q.Spec.Lease, q.Spec.MaxAttempts,
			replicaHealth(q.Stream.Cluster, q.Spec.Replicas), q.Stream.Messages, units.HumanSize(q.Stream.Bytes),
			orDash(q.Stream.Cluster.Leader), orDash(q.Spec.Owner), orDash(q.Spec.Residency))
	})
}

func newQueueDescribeCmd(g *globalOptions) *cobra.Command {
	return replyCmd(&cobra.Command{
		Use:   "describe NAME",
		Short: "Pending and leased jobs and the age of the oldest unfinished one",
		Args:  exactArgs(1, "NAME"),
	}, g.call, control.SubjQueueDescribe, nameRequest, writeQueueStatus)
}

func writeQueueStatus(w io.Writer, st catalog.QueueStatus) error {
	fmt.Fprintf(w, "Queue %s\n  subject:      %s.>\n  lease:        %s\n  max attempts: %d\n  replicas:     %s (leader %s)\n  owner:        %s\n",
		st.Spec.Name, st.Spec.Name, st.Spec.Lease, st.Spec.MaxAttempts,
		replicaHealth(st.Stream.Cluster, st.Spec.Replicas), orDash(st.Stream.Cluster.Leader), orDash(st.Spec.Owner))
	fmt.Fprintf(w, "  residency:    %s\n", orDash(st.Spec.Residency))
	fmt.Fprintf(w, "  pending:      %d\n  leased:       %d\n  redelivered:  %d\n  oldest job:   %s\n  pulls:        %d waiting\n",
		st.Pending, st.InFlight, st.Redelivered, age(st.OldestAge), st.Waiting)
	printQueueWorkers(w, st)
	return nil
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
	_ = writeTable(w, "    WORKERS ID\tJOBS\tRENEWED\tSTATE", st.Workers, func(w io.Writer, s platform.WorkerSession) {
		state := "live"
		if s.Lost {
			state = "lost: its jobs go back to live workers, or after the lease"
		}
		fmt.Fprintf(w, "    %s\t%d\t%s ago\t%s\n", s.ID, s.Jobs, s.Silent.Round(100*time.Millisecond), state)
	})
}
