package main

import (
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/internal/bench/mirror"
	"github.com/msgplatform/platform/internal/cli"
)

type benchMirrorOptions struct {
	rate     int
	duration time.Duration
	size     string
	sync     bool
}

func newBenchMirrorCmd(_ *globalOptions) *cobra.Command {
	o := benchMirrorOptions{}
	cmd := benchCmd("mirror", "Cross-region mirror lag p50/p99 at a fixed publish rate, and mirrored vs raw publish throughput",
		`Starts a temporary in-process two-region fabric (eu and us, one node each,
linked by a leafnode with the residency layer's deny list, and the residency
guard and gate running as platformd runs them) and, in the same run:

  raw:      publishes --rate events/s of --size bytes for --duration to a
            topic in eu that has no mirror;
  mirrored: the same to a topic in eu mirrored to us through the platform
            (region.Regions.Mirror), while a reader in us stamps when each
            event arrives in the mirror.

It prints the publish rate achieved on each and their ratio, the mirror lag
per event (arrival in us minus publish time in eu, same process clock)
p50/p99/max, and the mirror throughput over the source publish rate. Both
regions run without sync_always unless --sync-always is given.`, func(cmd *cobra.Command) error {
			size, err := sizeFlag("--size", o.size)
			if err != nil {
				return err
			}
			if o.rate <= 0 || o.duration <= 0 || size < 8 {
				return cli.UsageError{Err: errors.New("--rate and --duration must be > 0 and --size at least 8B")}
			}
			return mirror.Run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), o.rate, o.duration, int(size), o.sync)
		})
	cmd.Flags().IntVar(&o.rate, "rate", 5000, "events per second published")
	cmd.Flags().DurationVar(&o.duration, "duration", 5*time.Second, "how long each phase publishes")
	cmd.Flags().StringVar(&o.size, "size", "1KiB", "event size")
	cmd.Flags().BoolVar(&o.sync, "sync-always", false, "fsync every write in both regions (one R1 node with sync_always tops out near 3,000 events/s on 2 cores)")
	return cmd
}
