package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/internal/bench/outbox"
)

func newBenchOutboxCmd(g *globalOptions) *cobra.Command {
	o := outbox.Options{}
	cmd := benchCmd("outbox", "Outbox relay throughput vs raw publish, and commit-to-ack latency (Postgres and Pebble)",
		`In one run on one R3 topic, --runs times, interleaved (raw, postgres, pebble;
then the reverse order, and so on, so that the host's load drift hits every
figure alike):

  - raw async publish, as bench publish: --count events, up to --window
    in flight, each with a Nats-Msg-Id;
  - for a PostgreSQL outbox (a fresh database next to --dsn) and a Pebble
    outbox: --count events are committed first, then a relay started
    afterwards drains that backlog (relay_drain: from the relay taking the
    lease to the last ack; not limited by the database's commit rate).

Raw and relay publish with identical parameters: the same connection and
fabric, the same topic and keys, --size payloads, --window publishes in
flight (the relay's MaxInFlight) and a Nats-Msg-Id on every event (so the
stream deduplicates both alike). Raw publishes one by one (one ack per
event), as bench publish and most clients do; the relay publishes a
backlog in fast batches (one ack per flow window; relay_fast_batch_share
says how much), which is how it can beat raw. --single-publishes turns
the batches off, to compare like with like. Each run prints its figures under
bench.outbox.runN; then one median line per figure (ratios: the median of
the per-run ratios, goal >= 0.9).

Last, per backend, a new relay runs while --writers commit one event per
transaction at a steady --latency-rate: commit-to-ack latency p50/p99 (from
the commit's return to the ack).`, func(cmd *cobra.Command) error {
			return profiled(validOutboxOptions(o), o.CPUProfile, func() error { return outbox.Run(cmd.Context(), cmd.OutOrStdout(), g.benchRemote(), o) })
		})
	// 100,000 events: a drain of about 3-4 s per phase; 20,000 (under a
	// second) let one scheduling hiccup of the shared host swing a ratio
	// by 0.3.
	storeFlags(cmd, &o.StoreOptions, 100000)
	cmd.Flags().IntVar(&o.Window, "window", 1024, "publishes in flight, raw and relay alike (the relay's MaxInFlight)")
	cmd.Flags().IntVar(&o.Batch, "relay-batch", 5000, "the relay's BatchSize (records per read)")
	cmd.Flags().IntVar(&o.LatencyCount, "latency-count", 2000, "events for the latency phase")
	cmd.Flags().IntVar(&o.Writers, "writers", 8, "concurrent writers in the latency phase")
	cmd.Flags().IntVar(&o.LatencyRate, "latency-rate", 1000, "steady commit rate of the latency phase, events/s (one event per transaction)")
	cmd.Flags().BoolVar(&o.SkipPostgres, "skip-postgres", false, "measure the Pebble outbox only")
	cmd.Flags().BoolVar(&o.SinglePublishes, "single-publishes", false, "run the relays with fast batches off (SinglePublishes: one ack per event, like raw), to see what the batches gain")
	return cmd
}

// validOutboxOptions is o.Validate, then the latency phase's flags.
func validOutboxOptions(o outbox.Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	if o.LatencyCount < 1 || o.Writers < 1 || o.LatencyRate < 1 || o.Window < 1 || o.Window > 65536 {
		return fmt.Errorf("--latency-count, --writers and --latency-rate must be >= 1, --window 1..65536")
	}
	return nil
}
