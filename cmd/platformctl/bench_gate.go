package main

import (
	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/internal/bench/tenant"
)

func newBenchGateCmd(g *globalOptions) *cobra.Command {
	o := tenant.GateOptions{}
	cmd := benchCmd("gate", "A tenant member consuming through the JetStream gate vs the same consumer without it",
		`Starts a temporary 3-node fabric with a tenancy manager (what platformd
runs) and two like-for-like R3 topics of one partition, each with group
bench (a pinned partition consumer): one in the platform's account, read
by the admin user straight from JetStream; one in a tenant's account,
read by a tenant user platformctl-style creds name (--sub bench), whose
pulls and acks the account maps through the platform's gate.

Each run queues --count events on both, then drains each with nats.go
Fetch (--batch per pull) and one ack per event, until the consumer's ack
floor reaches the last event (so the acks' extra hop is counted), in
alternating order. Prints each run's events/s and ratio, then one median
line per figure, the ratio of the first --batch events of a run (a
stall hides in a long average), and per side the pulls that brought
nothing while events were pending (each waited out its 5 s expiry).
Progress goes to stderr.`, func(cmd *cobra.Command) error {
			return profiled(o.Validate(), o.CPUProfile, func() error { return tenant.RunGate(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), o) })
		})
	f := cmd.Flags()
	f.IntVar(&o.Count, "count", 20000, "events per run and side")
	f.IntVar(&o.Size, "size", 1024, "payload bytes")
	f.IntVar(&o.Batch, "batch", 100, "events per pull request")
	f.IntVar(&o.Runs, "runs", 3, "runs, both sides in each (alternating order); figures are medians")
	f.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of the whole bench to this file")
	return cmd
}
