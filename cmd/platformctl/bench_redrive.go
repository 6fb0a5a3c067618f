package main

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/internal/bench/redrive"
	"github.com/msgplatform/platform/internal/cli"
)

func newBenchRedriveCmd(_ *globalOptions) *cobra.Command {
	o := redrive.Options{}
	cmd := benchCmd("redrive", "Redrive throughput at an unlimited rate vs raw publish, and the rate held at --rate",
		`Starts a temporary 3-node fabric and, on it, in one run:

  raw:       publishes --count events of --size bytes to an R3 bench topic
             (async, --window in flight, each with a unique Nats-Msg-Id as
             a redrive's events have), as bench publish;
  unlimited: fills the topic's DLQ with --count entries (as the consumer
             runtime writes them) and redrives them all at an unlimited rate
             through the redrive service (no sample, the same --window of
             publishes in flight), timing the sending (the run's own Sent /
             Sending, which covers reading the entries from the DLQ and
             deleting the sent ones: a run completes only once they are
             gone, and the bench checks the DLQ is empty after each run);
  rated:     fills the DLQ with --rate-count entries and redrives them at
             --rate events/s, reporting achieved / requested.

The raw and unlimited measurements alternate, --runs times each, into an
emptied topic, and their figures are the medians (the ratio is median /
median). Goals: redrive at an unlimited rate >= 0.8 x raw publish; the
rated run within 0.95..1.05 of --rate. Progress goes to stderr; to stdout
one line of settings (bench.redrive.settings), then one figure per line.
The bench always starts its own fabric (--in-process is the only mode).`, func(cmd *cobra.Command) error {
			size, err := sizeFlag("--size", o.Size)
			if err != nil {
				return err
			}
			if !o.InProcess {
				return cli.UsageError{Err: errors.New("--in-process=false: bench redrive always runs on a temporary in-process fabric")}
			}
			if err := o.Validate(int(size)); err != nil {
				return cli.UsageError{Err: err}
			}
			return redrive.Run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), o, int(size))
		})
	f := cmd.Flags()
	f.IntVar(&o.Count, "count", 20000, "DLQ entries redriven at an unlimited rate (and events of the raw publish)")
	f.IntVar(&o.RateCount, "rate-count", 10000, "DLQ entries redriven at --rate")
	f.Float64Var(&o.Rate, "rate", 1000, "events/s of the rated run")
	f.StringVar(&o.Size, "size", "1KiB", "payload size")
	f.IntVar(&o.Partitions, "partitions", 24, "partitions of the bench topic")
	f.IntVar(&o.Keys, "keys", 1024, "distinct keys")
	f.IntVar(&o.Window, "window", 512, "raw publishes (and DLQ fills) in flight")
	f.IntVar(&o.Runs, "runs", 3, "raw publish and unlimited redrive runs (alternating); figures are medians")
	f.BoolVar(&o.SyncAlways, "sync-always", true, "fsync every write (the platform default)")
	f.BoolVar(&o.InProcess, "in-process", true, "start a temporary 3-node fabric (always: bench redrive has no other mode)")
	f.StringVar(&o.CPUProfile, "cpuprofile", "", "write CPU profiles of the first raw run (FILE.raw) and of the first unlimited redrive (FILE.redrive, from its run to its completion: the request's freeze excluded, as from its CPU figure); the fabric is in-process, so they include the servers")
	return cmd
}
