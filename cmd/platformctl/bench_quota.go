package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/internal/bench"
	"github.com/msgplatform/platform/internal/units"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/tenancy"
)

type benchQuotaOptions struct {
	quota, conns, bRate                int
	flood                              float64
	duration, warmup                   time.Duration
	size                               string
	count, window, runs                int
	partitions, replicas               int
	policy                             string
	syncAlways                         bool
	inProcess                          bool
	cpuProfile, memProfile, profileDir string
}

func newBenchQuotaCmd(g *globalOptions) *cobra.Command {
	o := benchQuotaOptions{}
	cmd := &cobra.Command{
		Use:   "quota",
		Short: "Publish-rate quota: a flooding tenant held to its quota, a neighbour's p99, the ingest's cost against raw publish",
		Long: `Creates three tenants, each with a topic "orders", and in one run measures:

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
stdout as 'name: value unit', progress to stderr.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			size, err := units.ParseSize(o.size)
			if err != nil {
				return usageError{fmt.Errorf("--size: %w", err)}
			}
			if err := o.validate(); err != nil {
				return usageError{err}
			}
			stop, err := bench.StartCPUProfile("--cpuprofile", o.cpuProfile)
			if err != nil {
				return usageError{err}
			}
			defer stop()
			if o.memProfile != "" {
				defer writeHeapProfile(o.memProfile, cmd.ErrOrStderr())
			}
			var tgt quotaTarget
			if o.inProcess {
				tgt, err = newInProcessQuotaTarget(cmd.Context(), o)
			} else {
				tgt, err = newRemoteQuotaTarget(g)
			}
			if err != nil {
				return err
			}
			defer tgt.close()
			lines, err := runBenchQuota(cmd.Context(), tgt, o, int(size), cmd.ErrOrStderr())
			bench.PrintLines(cmd.OutOrStdout(), lines)
			return err
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.quota, "quota", 2000, "tenant A's publish-rate quota, events/s")
	f.Float64Var(&o.flood, "flood", 10, "tenant A offers this multiple of its quota")
	f.IntVar(&o.conns, "conns", 6, "tenant A's connections (spread over the nodes)")
	f.IntVar(&o.bRate, "b-rate", 200, "tenant B's publish rate, events/s")
	f.DurationVar(&o.duration, "duration", 5*time.Second, "measured time of each rate phase")
	f.DurationVar(&o.warmup, "warmup", time.Second, "time before measuring A's rate")
	f.StringVar(&o.size, "size", "1KiB", "payload size")
	f.IntVar(&o.count, "count", 30000, "events of the raw and unthrottled throughput runs")
	f.IntVar(&o.runs, "runs", 3, "runs of each phase (raw/unthrottled interleaved, B alone/A flooding alternated); figures are medians")
	f.IntVar(&o.window, "window", 512, "publishes in flight in the throughput runs")
	f.IntVar(&o.partitions, "partitions", 3, "partitions of the bench topics")
	f.IntVar(&o.replicas, "replicas", 3, "replicas of the bench topics")
	f.StringVar(&o.policy, "policy", string(tenancy.PolicyThrottle), "tenant A's policy over the quota: throttle or reject")
	f.BoolVar(&o.syncAlways, "sync-always", false, "with --in-process: fsync every write")
	f.BoolVar(&o.inProcess, "in-process", false, "start a temporary 3-node fabric and tenancy manager instead of using --server")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole bench to this file")
	f.StringVar(&o.memProfile, "memprofile", "", "write a heap profile (allocations of the whole bench) to this file")
	f.StringVar(&o.profileDir, "profile-dir", "", "write a CPU profile of each throughput run (raw-N.pprof, unthrottled-N.pprof) to this directory; compare them with go tool pprof -diff_base (not with --cpuprofile)")
	return cmd
}

func (o benchQuotaOptions) validate() error {
	var errs []error
	if o.quota < 1 {
		errs = append(errs, fmt.Errorf("--quota: must be >= 1, got %d", o.quota))
	}
	if o.flood < 1 {
		errs = append(errs, fmt.Errorf("--flood: must be >= 1, got %g", o.flood))
	}
	if o.conns < 1 || o.bRate < 1 || o.count < 1 || o.runs < 1 || o.window < 1 || o.partitions < 1 || o.replicas < 1 {
		errs = append(errs, errors.New("--conns, --b-rate, --count, --runs, --window, --partitions and --replicas must be >= 1"))
	}
	if o.duration < 500*time.Millisecond || o.warmup < 0 {
		errs = append(errs, fmt.Errorf("--duration: must be >= 500ms (got %s), --warmup >= 0 (got %s)", o.duration, o.warmup))
	}
	if o.cpuProfile != "" && o.profileDir != "" {
		errs = append(errs, errors.New("--cpuprofile and --profile-dir: one at a time (Go profiles one CPU profile at once)"))
	}
	if p := tenancy.Policy(o.policy); p != tenancy.PolicyThrottle && p != tenancy.PolicyReject {
		errs = append(errs, fmt.Errorf("--policy: throttle or reject, got %q", o.policy))
	}
	return errors.Join(errs...)
}

func runBenchQuota(ctx context.Context, tgt quotaTarget, o benchQuotaOptions, size int, progress io.Writer) ([]string, error) {
	logf := func(format string, a ...any) { fmt.Fprintf(progress, "bench quota: "+format+"\n", a...) }
	spec := platform.DefaultTopicSpec("orders")
	spec.Partitions, spec.Replicas = o.partitions, o.replicas
	spec.Retention = platform.Retention{MaxAge: time.Hour}
	spec.Owner = "platformctl-bench"

	qa := tenancy.DefaultQuota()
	qa.PublishRate, qa.Policy = o.quota, tenancy.Policy(o.policy)
	qa.MaxPayload = int64(max(size, 1<<20))
	qb := tenancy.DefaultQuota()
	qb.MaxPayload = qa.MaxPayload
	creds := map[string][]byte{}
	for name, q := range map[string]tenancy.Quota{"bench-quota-a": qa, "bench-quota-b": qb, "bench-quota-c": qb} {
		c, err := tgt.tenant(ctx, name, q, spec)
		if err != nil {
			return nil, fmt.Errorf("tenant %s: %w", name, err)
		}
		creds[name] = c
	}
	dir, err := os.MkdirTemp("", "platformctl-bench-quota-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	tlsOpts, err := tgt.connOptions()
	if err != nil {
		return nil, err
	}
	connect := func(tenant string, url string) (*nats.Conn, error) {
		p := filepath.Join(dir, tenant+".creds")
		if err := os.WriteFile(p, creds[tenant], 0o600); err != nil {
			return nil, err
		}
		return nats.Connect(url, append([]nats.Option{nats.UserCredentials(p), nats.CustomInboxPrefix(tenancy.InboxPrefix("producer")),
			nats.Name("platformctl-bench-" + tenant), nats.Timeout(5 * time.Second)}, tlsOpts...)...)
	}
	var conns []*nats.Conn
	defer func() {
		for _, nc := range conns {
			nc.Close()
		}
	}()
	urls := tgt.urls()
	open := func(tenant string, i int) (*nats.Conn, error) {
		nc, err := connect(tenant, urls[i%len(urls)])
		if err == nil {
			conns = append(conns, nc)
		}
		return nc, err
	}

	// 1. Throughput: raw publish and an unthrottled tenant through the
	// ingest, on the same fabric.
	popts := bench.PublishOptions{Count: o.count, Size: size, Window: o.window, Runs: 1, Progress: progress,
		Subject: func(i int) string { return fmt.Sprintf("orders.key-%d", i%1024) }}
	raw := spec
	raw.Name = "bench-quota-raw"
	if err := tgt.applyRaw(ctx, raw); err != nil {
		return nil, fmt.Errorf("raw topic: %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if js, err := jetstream.New(tgt.admin()); err == nil {
			_ = js.DeleteStream(dctx, platform.StreamName(raw.Name))
		}
	}()
	logf("layout: %s; this process: GOMAXPROCS %d, %d CPUs", tgt.arrange(ctx, platform.StreamName(raw.Name), []string{"bench-quota-a", "bench-quota-b", "bench-quota-c"}, "bench-quota-c"), runtime.GOMAXPROCS(0), runtime.NumCPU())
	rawJS, err := jetstream.New(tgt.rawConn(), jetstream.WithPublishAsyncMaxPending(max(o.window*2, 256)))
	if err != nil {
		return nil, err
	}
	rawOpts := popts
	rawOpts.Subject = func(i int) string { return platform.TopicSubject(raw.Name, fmt.Sprintf("key-%d", i%1024)) }
	cc, err := open("bench-quota-c", 0)
	if err != nil {
		return nil, err
	}
	cjs, err := jetstream.New(cc, jetstream.WithPublishAsyncMaxPending(max(o.window*2, 256)))
	if err != nil {
		return nil, err
	}
	// Interleaved runs, medians: neither side gets the cold fabric.
	// The CPU time of this process per event (user+system) as well: with
	// --in-process it holds the servers, the ingest and the publisher, so
	// it is the whole cost of an event, and unlike the rate it hardly
	// depends on what else the machine runs.
	var raws, uns []bench.Result
	var rawCPU, unCPU []float64
	measure := func(what string, js jetstream.JetStream, opts bench.PublishOptions, empty func(context.Context) error) (bench.Result, float64, error) {
		// Each measurement starts alike: its stream emptied, no garbage
		// left by the one before.
		ectx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := empty(ectx)
		cancel()
		if err != nil {
			return bench.Result{}, 0, fmt.Errorf("%s: emptying its stream: %w", what, err)
		}
		runtime.GC()
		if o.profileDir != "" {
			stop, err := startPhaseProfile(o.profileDir, what)
			if err != nil {
				return bench.Result{}, 0, err
			}
			defer stop()
		}
		c0 := bench.ProcessCPU()
		res, _, err := bench.Publish(ctx, js, opts)
		if err != nil {
			return bench.Result{}, 0, fmt.Errorf("%s: %w", what, err)
		}
		return res, float64(bench.ProcessCPU()-c0) / float64(time.Microsecond) / float64(o.count), nil
	}
	emptyRaw := func(ctx context.Context) error {
		js, err := jetstream.New(tgt.admin())
		if err != nil {
			return err
		}
		s, err := js.Stream(ctx, platform.StreamName(raw.Name))
		if err != nil {
			return err
		}
		return s.Purge(ctx)
	}
	emptyC := func(ctx context.Context) error { return tgt.purge(ctx, "bench-quota-c", "orders") }
	for r := range o.runs {
		// Alternate which goes first, so neither always follows the other.
		first, second := "raw publish", "the unthrottled tenant through the ingest"
		if r%2 == 1 {
			first, second = second, first
		}
		logf("run %d/%d: %s, then %s, %d events each", r+1, o.runs, first, second, o.count)
		for _, side := range []string{first, second} {
			if side == "raw publish" {
				res, cpu, err := measure(side, rawJS, rawOpts, emptyRaw)
				if err != nil {
					return nil, err
				}
				raws, rawCPU = append(raws, res), append(rawCPU, cpu)
			} else {
				res, cpu, err := measure(side, cjs, popts, emptyC)
				if err != nil {
					return nil, err
				}
				uns, unCPU = append(uns, res), append(unCPU, cpu)
			}
		}
	}
	rawRes, unRes := bench.Median(raws), bench.Median(uns)

	payload := make([]byte, size)
	_, _ = rand.Read(payload)

	// 2 and 3, --runs times: B alone, then A floods while B publishes at
	// the same fixed rate from the same connection; figures are medians
	// over the runs (the machine may be shared: one run proves little).
	bc, err := open("bench-quota-b", 1)
	if err != nil {
		return nil, err
	}
	bjs, err := jetstream.New(bc)
	if err != nil {
		return nil, err
	}
	var ajs []jetstream.JetStream
	for i := range o.conns {
		nc, err := open("bench-quota-a", i)
		if err != nil {
			return nil, err
		}
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(256))
		if err != nil {
			return nil, err
		}
		ajs = append(ajs, js)
	}
	var alones, floodeds, atQuotas []latencies
	var fls []floodResult
	var cpuRatios []float64 // process CPU during B's phase, A flooding over A at its quota
	for r := range o.runs {
		logf("run %d/%d: tenant B alone at %d/s for %s", r+1, o.runs, o.bRate, o.duration)
		gc := gcSince()
		bAlone, err := paced(ctx, bjs, o.bRate, o.duration, payload)
		if err != nil {
			return nil, fmt.Errorf("tenant B alone: %w", err)
		}
		logf("run %d/%d: B alone: p50 %s p99 %s; %s", r+1, o.runs, bAlone.p50, bAlone.p99, gc())
		logf("run %d/%d: tenant A floods at %.0f/s (quota %d/s, %s) over %d connections while B publishes at %d/s, %s + %s warmup",
			r+1, o.runs, o.flood*float64(o.quota), o.quota, o.policy, o.conns, o.bRate, o.duration, o.warmup)
		var fl floodResult
		var bFlooded latencies
		var bErr error
		var wg sync.WaitGroup
		ic0, icOK := tgt.ingest(ctx, "bench-quota-a")
		wg.Add(1)
		go func() {
			defer wg.Done()
			fl = flood(ctx, ajs, o.flood*float64(o.quota), o.warmup, o.duration, payload)
		}()
		time.Sleep(o.warmup)
		gc = gcSince()
		cpu0 := bench.ProcessCPU()
		bFlooded, bErr = paced(ctx, bjs, o.bRate, o.duration, payload)
		floodCPU := bench.ProcessCPU() - cpu0
		gcs := gc()
		ic1, _ := tgt.ingest(ctx, "bench-quota-a")
		wg.Wait()
		ic2, _ := tgt.ingest(ctx, "bench-quota-a")
		if bErr != nil {
			return nil, fmt.Errorf("tenant B while A floods: %w", bErr)
		}
		logf("run %d/%d: B, A flooding: p50 %s p99 %s; %s", r+1, o.runs, bFlooded.p50, bFlooded.p99, gcs)
		logf("run %d/%d: A's flood: %s", r+1, o.runs, fl)
		if icOK {
			logf("run %d/%d: A's ingest during the flood: %s; after it: %s", r+1, o.runs, ic1.since(ic0), ic2.since(ic1))
		}
		// The same with A offering exactly its quota: what A's admitted
		// load alone costs B (on shared cores, A's quota of replicated
		// writes is real work); against it, the flood's own cost.
		logf("run %d/%d: tenant A at its quota (%d/s, no flood) while B publishes at %d/s", r+1, o.runs, o.quota, o.bRate)
		var bAtQuota latencies
		wg.Add(1)
		var flq floodResult
		go func() {
			defer wg.Done()
			flq = flood(ctx, ajs, float64(o.quota), o.warmup, o.duration, payload)
		}()
		time.Sleep(o.warmup)
		gc = gcSince()
		cpu0 = bench.ProcessCPU()
		bAtQuota, bErr = paced(ctx, bjs, o.bRate, o.duration, payload)
		quotaCPU := bench.ProcessCPU() - cpu0
		gcs = gc()
		wg.Wait()
		logf("run %d/%d: A at its quota: %s", r+1, o.runs, flq)
		if bErr != nil {
			return nil, fmt.Errorf("tenant B while A publishes at its quota: %w", bErr)
		}
		logf("run %d/%d: B, A at its quota: p50 %s p99 %s; %s", r+1, o.runs, bAtQuota.p50, bAtQuota.p99, gcs)
		if o.inProcess {
			logf("run %d/%d: process CPU while B publishes: %s with A flooding, %s with A at its quota", r+1, o.runs, floodCPU, quotaCPU)
			if quotaCPU > 0 {
				cpuRatios = append(cpuRatios, float64(floodCPU)/float64(quotaCPU))
			}
		}
		alones, floodeds, fls = append(alones, bAlone), append(floodeds, bFlooded), append(fls, fl)
		atQuotas = append(atQuotas, bAtQuota)
	}
	bAlone, bFlooded, fl := medianLatencies(alones), medianLatencies(floodeds), medianFlood(fls)
	bAtQuota := medianLatencies(atQuotas)

	ratio := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	achieved := float64(fl.acked) / o.duration.Seconds()
	for k, v := range fl.other {
		logf("A's other errors (the median run): %s %d", k, v)
	}
	lines := []string{
		fmt.Sprintf("bench.quota.quota: %d msg/s", o.quota),
		fmt.Sprintf("bench.quota.a_offered: %.0f msg/s", float64(fl.offered)/(o.duration+o.warmup).Seconds()),
		fmt.Sprintf("bench.quota.a_achieved: %.0f msg/s", achieved),
		fmt.Sprintf("bench.quota.a_offered_msgs: %d msgs", fl.offered),
		fmt.Sprintf("bench.quota.a_acked_in_window: %d msgs", fl.acked),
		fmt.Sprintf("bench.quota.a_acked_before_window: %d msgs", fl.early),
		fmt.Sprintf("bench.quota.a_acked_after_window: %d msgs", fl.late),
		fmt.Sprintf("bench.quota.a_refused: %d msgs", fl.refused),
		fmt.Sprintf("bench.quota.a_stalled: %d msgs", fl.stalled),
		fmt.Sprintf("bench.quota.a_errors_other: %d msgs", fl.otherTotal()),
		fmt.Sprintf("bench.quota.a_unanswered: %d msgs", fl.unanswered),
		fmt.Sprintf("bench.quota.a_unaccounted: %d msgs", fl.unaccounted()),
		fmt.Sprintf("bench.quota.a_achieved_over_quota: %.3f x", achieved/float64(o.quota)),
		fmt.Sprintf("bench.quota.b_rate: %.0f msg/s", bFlooded.rate),
		fmt.Sprintf("bench.quota.b_p50_alone: %.3f ms", bench.Ms(bAlone.p50)),
		fmt.Sprintf("bench.quota.b_p99_alone: %.3f ms", bench.Ms(bAlone.p99)),
		fmt.Sprintf("bench.quota.b_p50_flooded: %.3f ms", bench.Ms(bFlooded.p50)),
		fmt.Sprintf("bench.quota.b_p99_flooded: %.3f ms", bench.Ms(bFlooded.p99)),
		fmt.Sprintf("bench.quota.b_p99_flooded_over_alone: %.3f x", ratio(bench.Ms(bFlooded.p99), bench.Ms(bAlone.p99))),
		fmt.Sprintf("bench.quota.b_p99_a_at_quota: %.3f ms", bench.Ms(bAtQuota.p99)),
		fmt.Sprintf("bench.quota.b_p99_flooded_over_a_at_quota: %.3f x", ratio(bench.Ms(bFlooded.p99), bench.Ms(bAtQuota.p99))),
		fmt.Sprintf("bench.quota.b_errors: %d msgs", bAlone.errors+bFlooded.errors),
		fmt.Sprintf("bench.quota.raw_msgs_per_sec: %.0f msg/s", rawRes.MsgsPerS),
		fmt.Sprintf("bench.quota.raw_ack_p99: %.3f ms", bench.Ms(rawRes.P99)),
		fmt.Sprintf("bench.quota.unthrottled_msgs_per_sec: %.0f msg/s", unRes.MsgsPerS),
		fmt.Sprintf("bench.quota.unthrottled_ack_p99: %.3f ms", bench.Ms(unRes.P99)),
		fmt.Sprintf("bench.quota.unthrottled_over_raw: %.3f x", ratio(unRes.MsgsPerS, rawRes.MsgsPerS)),
	}
	if o.inProcess {
		rc, uc := bench.MedianOf(rawCPU), bench.MedianOf(unCPU)
		lines = append(lines,
			fmt.Sprintf("bench.quota.raw_cpu_per_msg: %.1f us", rc),
			fmt.Sprintf("bench.quota.unthrottled_cpu_per_msg: %.1f us", uc),
			fmt.Sprintf("bench.quota.raw_cpu_over_unthrottled_cpu: %.3f x", ratio(rc, uc)))
		if len(cpuRatios) > 0 {
			lines = append(lines, fmt.Sprintf("bench.quota.cpu_flooded_over_a_at_quota: %.3f x", bench.MedianOf(cpuRatios)))
		}
	}
	return lines, nil
}

// startPhaseProfile starts a CPU profile of one throughput run in dir,
// named after its side and numbered (raw-1.pprof, unthrottled-1.pprof,
// ...); stop ends it.
func startPhaseProfile(dir, what string) (stop func(), err error) {
	name := "unthrottled"
	if what == "raw publish" {
		name = "raw"
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("--profile-dir: %w", err)
	}
	var path string
	for i := 1; ; i++ {
		path = filepath.Join(dir, fmt.Sprintf("%s-%d.pprof", name, i))
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			break
		}
	}
	return bench.StartCPUProfile("--profile-dir", path)
}

// writeHeapProfile writes the allocation profile of the whole run to path.
func writeHeapProfile(path string, progress io.Writer) {
	f, err := os.Create(path)
	if err == nil {
		err = pprof.Lookup("allocs").WriteTo(f, 0)
		f.Close()
	}
	if err != nil {
		fmt.Fprintf(progress, "bench quota: --memprofile: %v\n", err)
	}
}

// gcSince starts counting this process's garbage collections and
// scheduling latencies; the function it returns describes them (with
// --in-process the servers' allocations and goroutines are counted too:
// they are what B's tail may wait for), and the whole machine's CPU
// meanwhile (other processes are noise in the figures).
func gcSince() func() string {
	var a runtime.MemStats
	runtime.ReadMemStats(&a)
	sa, ma := readSchedLatencies(), machineCPU()
	start := time.Now()
	return func() string {
		var b runtime.MemStats
		runtime.ReadMemStats(&b)
		s := time.Since(start).Seconds()
		line := fmt.Sprintf("process GC: %.1f cycles/s, %.0f MiB/s allocated, heap %d MiB, stop-the-world %s in all; %s",
			float64(b.NumGC-a.NumGC)/s, float64(b.TotalAlloc-a.TotalAlloc)/s/(1<<20), b.HeapAlloc>>20,
			time.Duration(b.PauseTotalNs-a.PauseTotalNs), readSchedLatencies().since(sa))
		if mb := machineCPU(); mb > 0 {
			line += fmt.Sprintf("; machine CPU %.2f of %d cores", (mb-ma).Seconds()/s, runtime.NumCPU())
		}
		return line
	}
}

type latencies struct {
	p50, p99 time.Duration
	rate     float64
	errors   int
}

// paced publishes synchronously at rate events/s for d and returns the
// ack latencies.
func paced(ctx context.Context, js jetstream.JetStream, rate int, d time.Duration, payload []byte) (latencies, error) {
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	var lat []time.Duration
	errs := 0
	for i := 0; ; i++ {
		next := start.Add(time.Duration(i) * interval)
		if next.Sub(start) >= d {
			break
		}
		if w := time.Until(next); w > 0 {
			time.Sleep(w)
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		t0 := time.Now()
		_, err := js.Publish(pctx, fmt.Sprintf("orders.b-%d", i%64), payload)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return latencies{}, ctx.Err()
			}
			errs++
			continue
		}
		lat = append(lat, time.Since(t0))
	}
	if len(lat) == 0 {
		return latencies{}, fmt.Errorf("no publish succeeded (%d errors)", errs)
	}
	slices.Sort(lat)
	return latencies{p50: bench.Percentile(lat, 0.5), p99: bench.Percentile(lat, 0.99),
		rate: float64(len(lat)) / time.Since(start).Seconds(), errors: errs}, nil
}
