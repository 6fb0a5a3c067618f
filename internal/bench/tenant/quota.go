package tenant

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

	"github.com/msgplatform/platform/internal/bench"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/tenancy"
)

// QuotaOptions configure one run of the quota harness; Validate names
// the command's flags.
type QuotaOptions struct {
	// Quota is tenant A's publish-rate quota (events/s), Flood the
	// multiple of it A offers from Conns connections; Policy is A's
	// policy over the quota (throttle or reject).
	Quota, Conns int
	Flood        float64
	Policy       string
	// BRate is tenant B's steady publish rate, events/s.
	BRate int
	// Duration is the measured time of each rate phase, after Warmup.
	Duration, Warmup time.Duration
	// Size is the payload size as the command's flag gives it (1KiB).
	Size string
	// Count events, Window in flight, in each throughput run.
	Count, Window, Runs   int
	Partitions, Replicas  int
	SyncAlways, InProcess bool
	// CPUProfile, MemProfile and ProfileDir are where the command
	// writes its profiles; ProfileDir gets one CPU profile per
	// throughput run.
	CPUProfile, MemProfile, ProfileDir string
}

// Validate reports every problem at once.
func (o QuotaOptions) Validate() error {
	var errs []error
	if o.Quota < 1 {
		errs = append(errs, fmt.Errorf("--quota: must be >= 1, got %d", o.Quota))
	}
	if o.Flood < 1 {
		errs = append(errs, fmt.Errorf("--flood: must be >= 1, got %g", o.Flood))
	}
	if o.Conns < 1 || o.BRate < 1 || o.Count < 1 || o.Runs < 1 || o.Window < 1 || o.Partitions < 1 || o.Replicas < 1 {
		errs = append(errs, errors.New("--conns, --b-rate, --count, --runs, --window, --partitions and --replicas must be >= 1"))
	}
	if o.Duration < 500*time.Millisecond || o.Warmup < 0 {
		errs = append(errs, fmt.Errorf("--duration: must be >= 500ms (got %s), --warmup >= 0 (got %s)", o.Duration, o.Warmup))
	}
	if o.CPUProfile != "" && o.ProfileDir != "" {
		errs = append(errs, errors.New("--cpuprofile and --profile-dir: one at a time (Go profiles one CPU profile at once)"))
	}
	if p := tenancy.Policy(o.Policy); p != tenancy.PolicyThrottle && p != tenancy.PolicyReject {
		errs = append(errs, fmt.Errorf("--policy: throttle or reject, got %q", o.Policy))
	}
	return errors.Join(errs...)
}

// RunQuota creates three tenants on a temporary fabric (o.InProcess) or
// on remote, measures the quota's enforcement and cost against raw
// publish in the same run, and writes one 'name: value unit' line per
// figure to out, also when it fails part-way; progress goes to progress.
func RunQuota(ctx context.Context, out, progress io.Writer, remote bench.Remote, o QuotaOptions, size int) error {
	var tgt quotaTarget
	var err error
	if o.InProcess {
		tgt, err = newInProcessQuotaTarget(ctx, o)
	} else {
		tgt, err = newRemoteQuotaTarget(remote)
	}
	if err != nil {
		return err
	}
	defer tgt.close()
	lines, err := runQuota(ctx, tgt, o, size, progress)
	bench.PrintLines(out, lines)
	return err
}

func runQuota(ctx context.Context, tgt quotaTarget, o QuotaOptions, size int, progress io.Writer) ([]string, error) {
	logf := func(format string, a ...any) { fmt.Fprintf(progress, "bench quota: "+format+"\n", a...) }
	spec := bench.TopicSpec("orders", o.Partitions, o.Replicas)

	qa := tenancy.DefaultQuota()
	qa.PublishRate, qa.Policy = o.Quota, tenancy.Policy(o.Policy)
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
	popts := bench.PublishOptions{Count: o.Count, Size: size, Window: o.Window, Runs: 1, Progress: progress,
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
	rawJS, err := jetstream.New(tgt.rawConn(), jetstream.WithPublishAsyncMaxPending(max(o.Window*2, 256)))
	if err != nil {
		return nil, err
	}
	rawOpts := popts
	rawOpts.Subject = func(i int) string { return platform.TopicSubject(raw.Name, fmt.Sprintf("key-%d", i%1024)) }
	cc, err := open("bench-quota-c", 0)
	if err != nil {
		return nil, err
	}
	cjs, err := jetstream.New(cc, jetstream.WithPublishAsyncMaxPending(max(o.Window*2, 256)))
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
		if o.ProfileDir != "" {
			stop, err := startPhaseProfile(o.ProfileDir, what)
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
		return res, float64(bench.ProcessCPU()-c0) / float64(time.Microsecond) / float64(o.Count), nil
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
	for r := range o.Runs {
		order := bench.RunOrder(r+1, []string{"raw publish", "the unthrottled tenant through the ingest"})
		logf("run %d/%d: %s, then %s, %d events each", r+1, o.Runs, order[0], order[1], o.Count)
		for _, side := range order {
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
	for i := range o.Conns {
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
	for r := range o.Runs {
		logf("run %d/%d: tenant B alone at %d/s for %s", r+1, o.Runs, o.BRate, o.Duration)
		gc := gcSince()
		bAlone, err := paced(ctx, bjs, o.BRate, o.Duration, payload)
		if err != nil {
			return nil, fmt.Errorf("tenant B alone: %w", err)
		}
		logf("run %d/%d: B alone: p50 %s p99 %s; %s", r+1, o.Runs, bAlone.p50, bAlone.p99, gc())
		logf("run %d/%d: tenant A floods at %.0f/s (quota %d/s, %s) over %d connections while B publishes at %d/s, %s + %s warmup",
			r+1, o.Runs, o.Flood*float64(o.Quota), o.Quota, o.Policy, o.Conns, o.BRate, o.Duration, o.Warmup)
		var fl floodResult
		var bFlooded latencies
		var bErr error
		var wg sync.WaitGroup
		ic0, icOK := tgt.ingest(ctx, "bench-quota-a")
		wg.Add(1)
		go func() {
			defer wg.Done()
			fl = flood(ctx, ajs, o.Flood*float64(o.Quota), o.Warmup, o.Duration, payload)
		}()
		time.Sleep(o.Warmup)
		gc = gcSince()
		cpu0 := bench.ProcessCPU()
		bFlooded, bErr = paced(ctx, bjs, o.BRate, o.Duration, payload)
		floodCPU := bench.ProcessCPU() - cpu0
		gcs := gc()
		ic1, _ := tgt.ingest(ctx, "bench-quota-a")
		wg.Wait()
		ic2, _ := tgt.ingest(ctx, "bench-quota-a")
		if bErr != nil {
			return nil, fmt.Errorf("tenant B while A floods: %w", bErr)
		}
		logf("run %d/%d: B, A flooding: p50 %s p99 %s; %s", r+1, o.Runs, bFlooded.p50, bFlooded.p99, gcs)
		logf("run %d/%d: A's flood: %s", r+1, o.Runs, fl)
		if icOK {
			logf("run %d/%d: A's ingest during the flood: %s; after it: %s", r+1, o.Runs, ic1.since(ic0), ic2.since(ic1))
		}
		// The same with A offering exactly its quota: what A's admitted
		// load alone costs B (on shared cores, A's quota of replicated
		// writes is real work); against it, the flood's own cost.
		logf("run %d/%d: tenant A at its quota (%d/s, no flood) while B publishes at %d/s", r+1, o.Runs, o.Quota, o.BRate)
		var bAtQuota latencies
		wg.Add(1)
		var flq floodResult
		go func() {
			defer wg.Done()
			flq = flood(ctx, ajs, float64(o.Quota), o.Warmup, o.Duration, payload)
		}()
		time.Sleep(o.Warmup)
		gc = gcSince()
		cpu0 = bench.ProcessCPU()
		bAtQuota, bErr = paced(ctx, bjs, o.BRate, o.Duration, payload)
		quotaCPU := bench.ProcessCPU() - cpu0
		gcs = gc()
		wg.Wait()
		logf("run %d/%d: A at its quota: %s", r+1, o.Runs, flq)
		if bErr != nil {
			return nil, fmt.Errorf("tenant B while A publishes at its quota: %w", bErr)
		}
		logf("run %d/%d: B, A at its quota: p50 %s p99 %s; %s", r+1, o.Runs, bAtQuota.p50, bAtQuota.p99, gcs)
		if o.InProcess {
			logf("run %d/%d: process CPU while B publishes: %s with A flooding, %s with A at its quota", r+1, o.Runs, floodCPU, quotaCPU)
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
	achieved := float64(fl.acked) / o.Duration.Seconds()
	for k, v := range fl.other {
		logf("A's other errors (the median run): %s %d", k, v)
	}
	lines := []string{
		fmt.Sprintf("bench.quota.quota: %d msg/s", o.Quota),
		fmt.Sprintf("bench.quota.a_offered: %.0f msg/s", float64(fl.offered)/(o.Duration+o.Warmup).Seconds()),
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
		fmt.Sprintf("bench.quota.a_achieved_over_quota: %.3f x", achieved/float64(o.Quota)),
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
	if o.InProcess {
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

// WriteHeapProfile writes the allocation profile of the whole run to path.
func WriteHeapProfile(path string, progress io.Writer) {
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
