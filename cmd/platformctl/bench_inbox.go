package main

import (
	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/internal/bench"
	"github.com/msgplatform/platform/internal/bench/inbox"
)

func newBenchInboxCmd(g *globalOptions) *cobra.Command {
	o := bench.StoreOptions{}
	cmd := benchCmd("inbox", "Consumption through the Pebble and Postgres inboxes vs raw consume+ack",
		`Publishes --count events to an R3 topic, then consumes them with a fresh
durable consumer per mode, --runs times, interleaved (raw, pebble, postgres;
then the reverse order, and so on): raw ack, through the Pebble inbox
(ProcessBatch: one synced commit per fetch) and through the Postgres inbox
(ProcessBatch: one transaction per fetch). Every mode consumes the same way:
fetches of 500, explicit ack, the next fetch in flight while a batch is
processed. Prints each run's msgs/s and ratios under bench.inbox.runN, then
one median line per figure (ratios: the median of the per-run ratios; goal
>= 0.8 for Pebble).`, func(cmd *cobra.Command) error {
			return profiled(o.Validate(), o.CPUProfile, func() error { return inbox.Run(cmd.Context(), cmd.OutOrStdout(), g.benchRemote(), o) })
		})
	storeFlags(cmd, &o, 20000)
	cmd.Flags().BoolVar(&o.SkipPostgres, "skip-postgres", false, "measure the Pebble inbox only")
	return cmd
}
