package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/internal/bench/group"
	"github.com/msgplatform/platform/internal/cli"
)

func newBenchGroupCmd(g *globalOptions) *cobra.Command {
	o := group.Options{}
	cmd := benchCmd("group", "Consumer group throughput vs raw consume+ack, and the rebalance pause when a member dies",
		`Preloads --count events of --size bytes over --keys keys into a bench topic
(--partitions partitions, --replicas replicas), then drains them twice on the
same fabric in the same run:

  raw:   one ordinary pull consumer per partition (no priority group), acking
         each event at once, spread over --members connections;
  group: a platform consumer group of --members Members (one connection
         each), handlers returning nil at once.

Both start their clients, let them fetch, then open a gate and time the drain
from the gate to the last event (so joining a group is not counted; its
steady state is). Figures are medians over --runs.

Then, with events published at --rate per second, it kills one member
--kills times (its connection closed and Member.Close with no time left: no
drain, no leave, so the others notice by the membership TTL, as after a
crash) and records, for each partition the dead member held, the gap between
the last event handled before the kill and the first handled by its new
owner. A replacement member joins after each kill.

By default it runs against the platform at --server (topic and group applied
through the control API, deleted afterwards unless --keep). With --in-process
it starts a temporary 3-node fabric itself.`, func(cmd *cobra.Command) error {
			size, err := sizeFlag("--size", o.Size)
			if err != nil {
				return err
			}
			if err := o.Validate(int(size)); err != nil {
				return cli.UsageError{Err: err}
			}
			return group.Run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), g.benchRemote(), o, int(size))
		})
	f := cmd.Flags()
	f.IntVar(&o.Count, "count", 50000, "events preloaded and drained per run")
	f.StringVar(&o.Size, "size", "1KiB", "payload size")
	f.IntVar(&o.Partitions, "partitions", 24, "partitions of the bench topic")
	f.IntVar(&o.Replicas, "replicas", 3, "replicas of the bench topic")
	f.IntVar(&o.Keys, "keys", 4096, "distinct keys")
	f.IntVar(&o.Members, "members", 12, "group members (and raw connections)")
	f.IntVar(&o.Kills, "kills", 3, "members killed one after another to measure the rebalance pause (0: skip)")
	f.IntVar(&o.Runs, "runs", 1, "drain runs; throughput figures are medians")
	f.IntVar(&o.Window, "window", 512, "preload publishes in flight")
	f.IntVar(&o.Rate, "rate", 2000, "events/s published while members are killed")
	f.DurationVar(&o.Heartbeat, "heartbeat", time.Second, "member heartbeat (the platform default)")
	f.DurationVar(&o.TTL, "ttl", 6*time.Second, "member TTL: a member silent this long is dead (the platform default)")
	f.StringVar(&o.Topic, "topic", "bench-group", "bench topic (created, and deleted afterwards unless --keep)")
	f.BoolVar(&o.Keep, "keep", false, "keep the bench topic and its groups")
	f.BoolVar(&o.InProcess, "in-process", false, "start a temporary 3-node fabric instead of using --server")
	f.BoolVar(&o.SyncAlways, "sync-always", true, "with --in-process: fsync every write (the platform default)")
	return cmd
}
