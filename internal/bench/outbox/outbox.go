package outbox

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"

	"github.com/msgplatform/platform/internal/bench"
	"github.com/msgplatform/platform/outboxrelay"
	"github.com/msgplatform/platform/outboxrelay/pebbleoutbox"
	"github.com/msgplatform/platform/outboxrelay/pgoutbox"
	"github.com/msgplatform/platform/platform"
)

// Options configure one run of the outbox harness.
type Options struct {
	bench.StoreOptions
	// Window is the publishes in flight, raw and relay alike (the
	// relay's MaxInFlight).
	Window int
	// Batch is the relay's BatchSize.
	Batch int
	// LatencyCount events are committed by Writers writers at
	// LatencyRate events/s in the latency phase.
	LatencyCount, Writers, LatencyRate int
	// SinglePublishes runs the relays with fast batches off.
	SinglePublishes bool
}

// outboxBackend is one outbox store under bench.
type outboxBackend struct {
	name    string
	store   outboxrelay.Store
	enqueue func(ctx context.Context, evs []outboxrelay.Event) error
	settle  func() error // after the backlog is committed, before the relay starts
}

// openOutboxBackends opens the PostgreSQL outbox (unless skipped) in a
// fresh database and the Pebble outbox in a temporary directory.
func openOutboxBackends(ctx context.Context, o Options) ([]outboxBackend, func(), error) {
	db, pool, cleanup, err := bench.OpenStores(ctx, o.StoreOptions, pgoutbox.Migrate)
	if err != nil {
		return nil, nil, err
	}
	var backends []outboxBackend
	if pool != nil {
		backends = append(backends, outboxBackend{name: "postgres", store: pgoutbox.New(pool), enqueue: func(ctx context.Context, evs []outboxrelay.Event) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				for _, ev := range evs {
					if err := pgoutbox.Enqueue(ctx, tx, ev); err != nil {
						return err
					}
				}
				return nil
			})
		}})
	}
	pstore, err := pebbleoutbox.Open(db, pebbleoutbox.Options{})
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	backends = append(backends, outboxBackend{name: "pebble", store: pstore, settle: db.Flush, enqueue: func(_ context.Context, evs []outboxrelay.Event) error {
		return pstore.Update(func(b *pebble.Batch) error {
			for _, ev := range evs {
				if err := pstore.Enqueue(b, ev); err != nil {
					return err
				}
			}
			return nil
		})
	}})
	return backends, cleanup, nil
}

// Run measures raw publish and a relay draining each outbox backend's
// backlog, o.Runs times interleaved, then each backend's commit-to-ack
// latency at a steady commit rate, and writes every figure to out.
func Run(ctx context.Context, out io.Writer, remote bench.Remote, o Options) error {
	const topic = "bench-outbox"
	nc, js, cleanup, err := bench.Setup(ctx, remote, o.InProcess, topic, o.Window)
	if err != nil {
		return err
	}
	defer cleanup()
	subject := func(i int) string { return platform.TopicSubject(topic, fmt.Sprintf("key-%d", i%o.Keys)) }
	fmt.Fprintf(out, "bench.outbox.publish_params: size=%dB window=%d keys=%d count=%d nats_msg_id=every_event topic=%s(R3,24_partitions) connection=shared (raw and relay identical)\n",
		o.Size, o.Window, o.Keys, o.Count, topic)
	rawRun := func(run int, label string) (float64, error) {
		id := time.Now().UnixNano()
		cpu := bench.ProcessCPU()
		raw, _, err := bench.Publish(ctx, js, bench.PublishOptions{
			Count: o.Count, Size: o.Size, Window: o.Window, Runs: 1, Subject: subject,
			MsgID: func(i int) string { return fmt.Sprintf("raw-%d-%d", id, i) },
		})
		if err != nil {
			return 0, err
		}
		cpu = bench.ProcessCPU() - cpu
		if label != "" {
			prefix := fmt.Sprintf("bench.outbox.run%d.%s", run, label)
			bench.PrintLines(out, raw.Lines(prefix))
			fmt.Fprintf(out, "%s.process_cpu_per_event: %.1f us (fabric included)\n", prefix, float64(cpu.Microseconds())/float64(o.Count))
		}
		return raw.MsgsPerS, nil
	}
	// Warm up (the first publishes to a new stream are slow), not printed.
	if _, err := rawRun(0, ""); err != nil {
		return err
	}
	backends, closeBackends, err := openOutboxBackends(ctx, o)
	if err != nil {
		return err
	}
	defer closeBackends()
	payload := make([]byte, o.Size)
	// Odd runs: raw first, then the backends; even runs: the reverse.
	steps := []string{"raw"}
	for _, b := range backends {
		steps = append(steps, b.name)
	}
	res, err := bench.Interleave(o.Runs, steps, func(step string) string { return step }, func(run int, step string) (float64, error) {
		if step == "raw" {
			return rawRun(run, "raw_publish")
		}
		b := backends[slices.IndexFunc(backends, func(b outboxBackend) bool { return b.name == step })]
		return benchRelayDrain(ctx, out, nc, b, topic, payload, run, o)
	}, func(run int, ratios map[string]float64) {
		for _, b := range backends {
			fmt.Fprintf(out, "bench.outbox.run%d.%s.relay_drain_vs_raw_ratio: %.2f x\n", run, b.name, ratios[b.name])
		}
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "bench.outbox.median.raw_publish.msgs_per_sec: %.0f msg/s (%d runs)\n", bench.MedianOf(res.Rates["raw"]), o.Runs)
	for _, b := range backends {
		fmt.Fprintf(out, "bench.outbox.median.%s.relay_drain_msgs_per_sec: %.0f msg/s (%d runs)\n", b.name, bench.MedianOf(res.Rates[b.name]), o.Runs)
		fmt.Fprintf(out, "bench.outbox.median.%s.relay_drain_vs_raw_ratio: %.2f x (median of %d per-run ratios; goal >= 0.9)\n", b.name, bench.MedianOf(res.Ratios[b.name]), o.Runs)
	}
	for _, b := range backends {
		if err := benchRelaySteady(ctx, out, nc, b, topic, payload, o); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// benchRelayHandle is a relay started for the bench, counting its acks.
type benchRelayHandle struct {
	r     *outboxrelay.Relay
	acked atomic.Int64
	onAck func(outboxrelay.Record, outboxrelay.Ack)
	stop  func()
}

func startBenchRelay(ctx context.Context, nc *nats.Conn, b outboxBackend, phase string, o Options, onAck func(outboxrelay.Record, outboxrelay.Ack)) (*benchRelayHandle, error) {
	h := &benchRelayHandle{onAck: onAck}
	cfg := outboxrelay.DefaultConfig("bench-" + b.name + "-" + phase)
	cfg.BatchSize, cfg.MaxInFlight = o.Batch, o.Window
	cfg.SinglePublishes = o.SinglePublishes
	cfg.OnAck = func(rec outboxrelay.Record, ack outboxrelay.Ack) {
		if h.onAck != nil {
			h.onAck(rec, ack)
		}
		h.acked.Add(1)
	}
	cfg.Logger = bench.DiscardLogger()
	r, err := outboxrelay.New(cfg, b.store, nc)
	if err != nil {
		return nil, err
	}
	h.r = r
	rctx, cancel := context.WithCancel(ctx)
	go func() { _ = r.Run(rctx) }()
	h.stop = func() {
		cancel()
		cctx, c2 := context.WithTimeout(context.Background(), 10*time.Second)
		_ = r.Close(cctx)
		c2()
	}
	return h, nil
}

// waitLeader waits until the relay holds the lease.
func (h *benchRelayHandle) waitLeader(ctx context.Context) error {
	deadline := time.Now().Add(time.Minute)
	for !h.r.Leader() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench outbox: the relay did not take the lease within a minute")
		}
		time.Sleep(100 * time.Microsecond)
	}
	return nil
}

func (h *benchRelayHandle) waitAcked(ctx context.Context, name string, n int64, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for h.acked.Load() < n {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench outbox: %s: %d of %d events acked after %s", name, h.acked.Load(), n, limit)
		}
		time.Sleep(200 * time.Microsecond)
	}
	return nil
}

// benchRelayDrain commits --count events (1000 per transaction), then
// starts a relay and times it from taking the lease to the last ack: the
// relay's own throughput, independent of how fast the database commits.
func benchRelayDrain(ctx context.Context, out io.Writer, nc *nats.Conn, b outboxBackend, topic string, payload []byte, run int, o Options) (float64, error) {
	id := time.Now().UnixNano()
	evs := make([]outboxrelay.Event, o.Count)
	for i := range evs {
		evs[i] = outboxrelay.Event{ID: fmt.Sprintf("%s-%d-%d", b.name, id, i), Topic: topic, Key: fmt.Sprintf("key-%d", i%o.Keys), Payload: payload}
	}
	cstart := time.Now()
	for i := 0; i < len(evs); i += 1000 {
		if err := b.enqueue(ctx, evs[i:min(i+1000, len(evs))]); err != nil {
			return 0, err
		}
	}
	committed := time.Since(cstart)
	if b.settle != nil {
		if err := b.settle(); err != nil {
			return 0, err
		}
	}
	// Every ack's time and latency, for the drain's timeline (the tail,
	// when few keys are left, shows there) and ack latency next to raw's.
	var n atomic.Int64
	ackAt := make([]time.Time, o.Count)
	lats := make([]time.Duration, o.Count)
	h, err := startBenchRelay(ctx, nc, b, fmt.Sprintf("drain%d", run), o, func(_ outboxrelay.Record, ack outboxrelay.Ack) {
		if i := n.Add(1) - 1; i < int64(len(ackAt)) {
			ackAt[i], lats[i] = time.Now(), ack.Latency
		}
	})
	if err != nil {
		return 0, err
	}
	defer h.stop()
	if err := h.waitLeader(ctx); err != nil {
		return 0, err
	}
	start, cpu := time.Now(), bench.ProcessCPU()
	if err := h.waitAcked(ctx, b.name, int64(o.Count), 5*time.Minute); err != nil {
		return 0, err
	}
	elapsed, cpu := time.Since(start), bench.ProcessCPU()-cpu
	rate := float64(o.Count) / elapsed.Seconds()
	prefix := fmt.Sprintf("bench.outbox.run%d.%s", run, b.name)
	fmt.Fprintf(out, "%s.commit_backlog_before_relay: %.3f s (%d events, %.0f events/s)\n", prefix, committed.Seconds(), o.Count, float64(o.Count)/committed.Seconds())
	fmt.Fprintf(out, "%s.relay_drain_msgs_per_sec: %.0f msg/s\n", prefix, rate)
	c := h.r.Counts()
	fmt.Fprintf(out, "%s.relay_fast_batch_share: %.1f %% (%d of %d acked events stored through fast batches; %d republished singly after a batch ended before them)\n",
		prefix, 100*float64(c.Batched)/float64(max(1, c.OK+c.Duplicate)), c.Batched, c.OK+c.Duplicate, c.BatchRetried)
	fmt.Fprintf(out, "%s.process_cpu_per_event: %.1f us (fabric and relay included, database server not)\n", prefix, float64(cpu.Microseconds())/float64(o.Count))
	slices.Sort(lats)
	fmt.Fprintf(out, "%s.relay_ack_p50: %.3f ms\n", prefix, bench.Ms(bench.Percentile(lats, 0.50)))
	fmt.Fprintf(out, "%s.relay_ack_p99: %.3f ms\n", prefix, bench.Ms(bench.Percentile(lats, 0.99)))
	at := func(q float64) float64 { return bench.Ms(ackAt[max(0, int(q*float64(o.Count))-1)].Sub(start)) }
	fmt.Fprintf(out, "%s.relay_drain_timeline: first_ack=%.0fms 50%%=%.0fms 90%%=%.0fms 100%%=%.0fms (last 10%% of events: %.0f%% of the drain)\n",
		prefix, at(0), at(0.5), at(0.9), at(1), 100*(at(1)-at(0.9))/at(1))
	return rate, nil
}

// benchRelaySteady runs a relay while writers commit one event per
// transaction at --latency-rate events/s, and prints commit-to-ack
// latency (from the commit's return to the ack reaching the relay).
func benchRelaySteady(ctx context.Context, out io.Writer, nc *nats.Conn, b outboxBackend, topic string, payload []byte, o Options) error {
	var commitAt sync.Map // event id -> time.Time
	var latMu sync.Mutex
	lats := make([]time.Duration, 0, o.LatencyCount)
	h, err := startBenchRelay(ctx, nc, b, "steady", o, func(rec outboxrelay.Record, _ outboxrelay.Ack) {
		if t, ok := commitAt.Load(rec.ID); ok {
			d := time.Since(t.(time.Time))
			latMu.Lock()
			lats = append(lats, d)
			latMu.Unlock()
		}
	})
	if err != nil {
		return err
	}
	defer h.stop()
	if err := h.waitLeader(ctx); err != nil {
		return err
	}
	id := time.Now().UnixNano()
	interval := time.Second / time.Duration(o.LatencyRate)
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	lstart := time.Now()
	for range o.Writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(o.LatencyCount); i = next.Add(1) {
				time.Sleep(time.Until(lstart.Add(time.Duration(i-1) * interval)))
				ev := outboxrelay.Event{ID: fmt.Sprintf("%s-lat-%d-%d", b.name, id, i), Topic: topic, Key: fmt.Sprintf("key-%d", i%int64(o.Keys)), Payload: payload}
				if err := b.enqueue(ctx, []outboxrelay.Event{ev}); err != nil {
					failed.Store(err)
					return
				}
				commitAt.Store(ev.ID, time.Now())
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return err
	}
	commitRate := float64(o.LatencyCount) / time.Since(lstart).Seconds()
	if err := h.waitAcked(ctx, b.name, int64(o.LatencyCount), time.Minute); err != nil {
		return err
	}
	latMu.Lock()
	defer latMu.Unlock()
	slices.Sort(lats)
	prefix := fmt.Sprintf("bench.outbox.%s.steady_%d_commits_per_sec", b.name, o.LatencyRate)
	fmt.Fprintf(out, "%s.achieved_commits_per_sec: %.0f tx/s\n", prefix, commitRate)
	fmt.Fprintf(out, "%s.commit_to_ack_p50: %.3f ms\n", prefix, bench.Ms(bench.Percentile(lats, 0.50)))
	fmt.Fprintf(out, "%s.commit_to_ack_p99: %.3f ms\n", prefix, bench.Ms(bench.Percentile(lats, 0.99)))
	return nil
}
