package main

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/internal/bench/tenant"
	"github.com/msgplatform/platform/tenancy"
)

func newBenchQuotaCmd(g *globalOptions) *cobra.Command {
	o := tenant.QuotaOptions{}
	cmd := benchCmd("quota", "Publish-rate quota: a flooding tenant held to its quota, a neighbour's p99, the ingest's cost against raw publish",
		`Creates three tenants, each with a topic "orders", and in one run measures:

  1. raw: bench publish (async, --window in flight) of --count events to a
     platform topic, and the same through the ingest by an unthrottled
     tenant (C): bench.quota.unthrottled_over_raw (goal >= 0.85);
  2. tenant B alone, publishing synchronously at the fixed --b-rate: its
     ack p99;
  3. tenant A, capped at --quota events/s, flooding at --flood x quota from
     --conns connections spread over the nodes, while B publishes exactly
     as in 2 (same rate, same connection):
     bench.quota.a_achieved_over_quota (goal 0.95-1.05) and
     bench.quota.b_p99_flooded_over_alone (goal <= 1.5).
  4. the same with A offering exactly its quota (no flood): B's p99 then
     (bench.quota.b_p99_a_at_quota) is what A's admitted load costs B on
     shared cores; bench.quota.b_p99_flooded_over_a_at_quota is the
     flood's own cost (the enforcement's isolation). With --in-process,
     bench.quota.cpu_flooded_over_a_at_quota is the process's CPU during
     B's phase with A flooding over that with A at its quota (the flood's
     CPU cost, steadier than p99 on a shared machine).
  1 runs --runs times, raw and the tenant alternating which goes first,
  each into its emptied stream (with --server, the tenant's stream cannot
  be emptied and keeps what earlier runs stored). 2, 3 and 4 alternate
  --runs times; every figure is the median over the runs, but A's outcome
  counts are those of the run with the median acks.

A's flood is open loop: every 10 ms tick offers what fell due; a
connection whose in-flight window stays full for the tick sends none of
it (a_stalled: held back at its connection). Every offered event has one
outcome: a_acked_in_window (the achieved rate), a_acked_before_window
(warmup), a_acked_after_window, a_refused (the 429), a_stalled,
a_errors_other (kinds on stderr) or a_unanswered (nothing 10 s after the
flood); they add up to a_offered_msgs (a_unaccounted is 0).

With --in-process it starts a temporary 3-node fabric and a tenancy
manager (what platformd runs); otherwise it uses the platform at --server
and deletes its tenants (bench-quota-a|b|c) afterwards. Figures go to
stdout as 'name: value unit', progress to stderr.`, func(cmd *cobra.Command) error {
			size, err := sizeFlag("--size", o.Size)
			if err != nil {
				return err
			}
			return profiled(o.Validate(), o.CPUProfile, func() error {
				if o.MemProfile != "" {
					defer tenant.WriteHeapProfile(o.MemProfile, cmd.ErrOrStderr())
				}
				return tenant.RunQuota(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), g.benchRemote(), o, int(size))
			})
		})
	f := cmd.Flags()
	f.IntVar(&o.Quota, "quota", 2000, "tenant A's publish-rate quota, events/s")
	f.Float64Var(&o.Flood, "flood", 10, "tenant A offers this multiple of its quota")
	f.IntVar(&o.Conns, "conns", 6, "tenant A's connections (spread over the nodes)")
	f.IntVar(&o.BRate, "b-rate", 200, "tenant B's publish rate, events/s")
	f.DurationVar(&o.Duration, "duration", 5*time.Second, "measured time of each rate phase")
	f.DurationVar(&o.Warmup, "warmup", time.Second, "time before measuring A's rate")
	f.StringVar(&o.Size, "size", "1KiB", "payload size")
	f.IntVar(&o.Count, "count", 30000, "events of the raw and unthrottled throughput runs")
	f.IntVar(&o.Runs, "runs", 3, "runs of each phase (raw/unthrottled interleaved, B alone/A flooding alternated); figures are medians")
	f.IntVar(&o.Window, "window", 512, "publishes in flight in the throughput runs")
	f.IntVar(&o.Partitions, "partitions", 3, "partitions of the bench topics")
	f.IntVar(&o.Replicas, "replicas", 3, "replicas of the bench topics")
	f.StringVar(&o.Policy, "policy", string(tenancy.PolicyThrottle), "tenant A's policy over the quota: throttle or reject")
	f.BoolVar(&o.SyncAlways, "sync-always", false, "with --in-process: fsync every write")
	f.BoolVar(&o.InProcess, "in-process", false, "start a temporary 3-node fabric and tenancy manager instead of using --server")
	f.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of the whole bench to this file")
	f.StringVar(&o.MemProfile, "memprofile", "", "write a heap profile (allocations of the whole bench) to this file")
	f.StringVar(&o.ProfileDir, "profile-dir", "", "write a CPU profile of each throughput run (raw-N.pprof, unthrottled-N.pprof) to this directory; compare them with go tool pprof -diff_base (not with --cpuprofile)")
	return cmd
}
