package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/internal/bench/queue"
)

func newBenchQueueCmd(g *globalOptions) *cobra.Command {
	o := queue.Options{}
	cmd := benchCmd("queue", "Work-queue workers (leases, one job per free slot) vs a raw nats.go consumer",
		`Queues --count jobs on an R3 work queue, then drains them --runs times
with each of two consumers, interleaved (raw first in odd runs, workers
first in even runs), each handler taking --work per job on --concurrency
goroutines:

  raw:      nats.go Consume on the queue's consumer, up to --concurrency
            jobs prefetched, a pool of --concurrency handlers, one ack each
            (what a service writes by hand: no lease renewal, no sessions,
            no retry policy or dead letters);
  workers:  consumer.Workers (Concurrency --concurrency): a job is claimed
            only when a handler is free, its lease renewed while it runs,
            its session recorded, its outcome settled by the retry policy.

Prints each run's jobs/s and ratio under bench.queue.runN, then one median
line per figure (the ratio is the median of the per-run ratios). Progress
goes to stderr.`, func(cmd *cobra.Command) error {
			return profiled(o.Validate(), o.CPUProfile, func() error {
				return queue.Run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), g.benchRemote(), o)
			})
		})
	f := cmd.Flags()
	f.IntVar(&o.Count, "count", 5000, "jobs per run and consumer")
	f.IntVar(&o.Size, "size", 1024, "payload bytes")
	f.IntVar(&o.Concurrency, "concurrency", 8, "handlers running at once")
	f.DurationVar(&o.Work, "work", time.Millisecond, "time each handler takes per job")
	f.IntVar(&o.Runs, "runs", 3, "runs, raw and workers in each (alternating order); figures are medians")
	f.BoolVar(&o.InProcess, "in-process", false, "start a temporary 3-node fabric instead of using --server")
	f.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of the whole bench to this file")
	return cmd
}
