package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/internal/bench"
	"github.com/msgplatform/platform/outboxrelay"
	"github.com/msgplatform/platform/outboxrelay/pebbleoutbox"
	"github.com/msgplatform/platform/outboxrelay/pgoutbox"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/inbox/pebbleinbox"
	"github.com/msgplatform/platform/platform/inbox/pginbox"
)

type benchOutboxOptions struct {
	dsn                     string
	count, keys, size       int
	latencyCount, writers   int
	latencyRate             int
	inProcess, skipPostgres bool
}

func (o *benchOutboxOptions) flags(cmd *cobra.Command, count int) {
	f := cmd.Flags()
	f.StringVar(&o.dsn, "dsn", "", "PostgreSQL DSN; the bench creates and drops its own database there (needs CREATEDB)")
	f.IntVar(&o.count, "count", count, "events for the throughput phase")
	f.IntVar(&o.keys, "keys", 1024, "distinct keys")
	f.IntVar(&o.size, "size", 1024, "payload bytes")
	f.BoolVar(&o.inProcess, "in-process", false, "start a temporary 3-node fabric instead of using --server")
}

// benchTarget is a connection to the platform (or a temporary fabric).
func benchConnect(ctx context.Context, g *globalOptions, inProcess bool) (*nats.Conn, func(), error) {
	if !inProcess {
		nc, err := g.connect()
		if err != nil {
			return nil, nil, err
		}
		return nc, nc.Close, nil
	}
	dir, err := os.MkdirTemp("", "platformctl-bench-")
	if err != nil {
		return nil, nil, err
	}
	trust, err := embeddednats.NewTrust()
	if err != nil {
		return nil, nil, err
	}
	cfg := embeddednats.DefaultFabricConfig()
	cfg.Port, cfg.ClusterPort, cfg.DataDir = -1, -1, dir
	cfg.LameDuck = 200 * time.Millisecond
	f, err := embeddednats.NewFabric(cfg, trust)
	if err != nil {
		return nil, nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := f.Start(sctx); err != nil {
		return nil, nil, err
	}
	nc, err := f.Connect(nats.MaxReconnects(-1))
	if err != nil {
		return nil, nil, err
	}
	return nc, func() {
		nc.Close()
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = f.Close(cctx)
		os.RemoveAll(dir)
	}, nil
}

func benchTopic(ctx context.Context, js jetstream.JetStream, name string) (func(), error) {
	spec := platform.DefaultTopicSpec(name)
	spec.Partitions, spec.Replicas = 24, 3
	spec.Retention = platform.Retention{MaxAge: time.Hour}
	spec.Owner = "platformctl-bench"
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := platform.NewReconciler(js, platform.ReconcilerOptions{}).ApplyTopic(actx, spec, platform.ApplyOptions{AllowReducedReplicas: true}); err != nil {
		return nil, fmt.Errorf("create bench topic %s: %w", name, err)
	}
	return func() {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(dctx, platform.StreamName(name))
	}, nil
}

// benchDatabase creates a fresh database next to dsn and returns its
// pool and a cleanup dropping it.
func benchDatabase(ctx context.Context, dsn string) (*pgxpool.Pool, func(), error) {
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("--dsn: %w", err)
	}
	defer admin.Close(ctx)
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "platformctl_bench_" + hex.EncodeToString(b)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return nil, nil, fmt.Errorf("create bench database: %w", err)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, nil, err
	}
	u.Path = "/" + name
	pool, err := pgxpool.New(ctx, u.String())
	if err != nil {
		return nil, nil, err
	}
	return pool, func() {
		pool.Close()
		c, err := pgx.Connect(context.Background(), dsn)
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(context.Background())
		}
	}, nil
}

func newBenchOutboxCmd(g *globalOptions) *cobra.Command {
	o := benchOutboxOptions{}
	cmd := &cobra.Command{
		Use:   "outbox",
		Short: "Outbox relay throughput vs raw publish, and commit-to-ack latency (Postgres and Pebble)",
		Long: `In one run on one R3 topic: raw async publish (the baseline, as bench publish);
then, for a PostgreSQL outbox (a fresh database next to --dsn) and a Pebble
outbox: --count events are committed first, and a relay started afterwards
drains that backlog (relay_drain_*: the relay's own throughput, timed from its
start to the last ack, not limited by the database's commit rate); then a new
relay runs while --writers commit one event per transaction at a steady
--latency-rate, giving commit-to-ack latency (from the commit's return to the
ack). Prints 'name: value unit' lines and relay/raw ratios (goal >= 0.9).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.dsn == "" && !o.skipPostgres {
				return usageError{fmt.Errorf("--dsn is required (or --skip-postgres)")}
			}
			if o.count < 1 || o.keys < 1 || o.latencyCount < 1 || o.writers < 1 || o.latencyRate < 1 {
				return usageError{fmt.Errorf("--count, --keys, --latency-count, --writers and --latency-rate must be >= 1")}
			}
			return runBenchOutbox(cmd.Context(), cmd.OutOrStdout(), g, o)
		},
	}
	o.flags(cmd, 20000)
	cmd.Flags().IntVar(&o.latencyCount, "latency-count", 2000, "events for the latency phase")
	cmd.Flags().IntVar(&o.writers, "writers", 8, "concurrent writers in the latency phase")
	cmd.Flags().IntVar(&o.latencyRate, "latency-rate", 1000, "steady commit rate of the latency phase, events/s (one event per transaction)")
	cmd.Flags().BoolVar(&o.skipPostgres, "skip-postgres", false, "measure the Pebble outbox only")
	return cmd
}

func runBenchOutbox(ctx context.Context, out io.Writer, g *globalOptions, o benchOutboxOptions) error {
	const topic = "bench-outbox"
	nc, js, cleanup, err := benchSetup(ctx, g, o.inProcess, topic)
	if err != nil {
		return err
	}
	defer cleanup()
	// Raw publish is measured before and after each relay drain; a ratio
	// is against the mean of the two runs around it (the host's load
	// drifts within a run).
	rawRun := func(label string) (float64, error) {
		raw, _, err := bench.Publish(ctx, js, bench.PublishOptions{
			Count: o.count, Size: o.size, Window: 512, Runs: 1,
			Subject: func(i int) string { return platform.TopicSubject(topic, fmt.Sprintf("key-%d", i%o.keys)) },
		})
		if err != nil {
			return 0, err
		}
		printLines(out, raw.Lines("bench.outbox."+label))
		return raw.MsgsPerS, nil
	}
	// Warm up (the first publishes to a new stream are slow), not printed.
	if _, _, err := bench.Publish(ctx, js, bench.PublishOptions{
		Count: min(o.count, 5000), Size: o.size, Window: 512, Runs: 1,
		Subject: func(i int) string { return platform.TopicSubject(topic, fmt.Sprintf("key-%d", i%o.keys)) },
	}); err != nil {
		return err
	}
	rawRate, err := rawRun("raw_publish")
	if err != nil {
		return err
	}
	type backend struct {
		name    string
		store   outboxrelay.Store
		enqueue func(ctx context.Context, evs []outboxrelay.Event) error
		settle  func() error // after the backlog is committed, before the relay starts
	}
	var backends []backend
	if !o.skipPostgres {
		pool, cleanup, err := benchDatabase(ctx, o.dsn)
		if err != nil {
			return err
		}
		defer cleanup()
		if err := pgoutbox.Migrate(ctx, pool); err != nil {
			return err
		}
		backends = append(backends, backend{name: "postgres", store: pgoutbox.New(pool), enqueue: func(ctx context.Context, evs []outboxrelay.Event) error {
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
	dir, err := os.MkdirTemp("", "platformctl-bench-pebble-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietPebbleLogger{}})
	if err != nil {
		return err
	}
	defer db.Close()
	pstore, err := pebbleoutbox.Open(db, pebbleoutbox.Options{})
	if err != nil {
		return err
	}
	backends = append(backends, backend{name: "pebble", store: pstore, settle: db.Flush, enqueue: func(_ context.Context, evs []outboxrelay.Event) error {
		return pstore.Update(func(b *pebble.Batch) error {
			for _, ev := range evs {
				if err := pstore.Enqueue(b, ev); err != nil {
					return err
				}
			}
			return nil
		})
	}})
	payload := make([]byte, o.size)
	for _, b := range backends {
		rawAfter := func() (float64, error) { return rawRun("raw_publish_after_" + b.name + "_drain") }
		if rawRate, err = benchRelay(ctx, out, nc, b.name, b.store, b.enqueue, topic, payload, b.settle, rawRate, rawAfter, o); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// benchRelay measures one outbox in two phases, each with its own relay:
//
//   - drain: --count events are committed first (1000 per transaction),
//     and only then a relay starts; the rate is --count over the time from
//     its start (once the lease bucket exists; lease acquisition included)
//     to the last ack. It is the
//     relay's own throughput, independent of how fast the database commits.
//   - steady: writers commit one event per transaction at --latency-rate
//     events/s while the relay runs; commit-to-ack is from the commit's
//     return to the ack reaching the relay.
func benchRelay(ctx context.Context, out io.Writer, nc *nats.Conn, name string, store outboxrelay.Store,
	enqueue func(context.Context, []outboxrelay.Event) error, topic string, payload []byte,
	settle func() error, rawBefore float64, rawAfter func() (float64, error), o benchOutboxOptions,
) (float64, error) {
	var acked atomic.Int64
	var onAck atomic.Value // func(outboxrelay.Record)
	onAck.Store(func(outboxrelay.Record) {})
	startRelay := func(phase string) (*outboxrelay.Relay, func(), error) {
		cfg := outboxrelay.DefaultConfig("bench-" + name + "-" + phase)
		cfg.BatchSize, cfg.MaxInFlight = 5000, 2048
		cfg.OnAck = func(rec outboxrelay.Record, _ bool) {
			acked.Add(1)
			onAck.Load().(func(outboxrelay.Record))(rec)
		}
		cfg.Logger = discardLogger()
		r, err := outboxrelay.New(cfg, store, nc)
		if err != nil {
			return nil, nil, err
		}
		rctx, cancel := context.WithCancel(ctx)
		go func() { _ = r.Run(rctx) }()
		return r, func() {
			cancel()
			cctx, c2 := context.WithTimeout(context.Background(), 10*time.Second)
			_ = r.Close(cctx)
			c2()
		}, nil
	}
	waitAcked := func(n int64, limit time.Duration) error {
		deadline := time.Now().Add(limit)
		for acked.Load() < n {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("bench outbox: %s: %d of %d events acked after %s", name, acked.Load(), n, limit)
			}
			time.Sleep(time.Millisecond)
		}
		return nil
	}
	// Drain of an already committed backlog.
	run := time.Now().UnixNano()
	evs := make([]outboxrelay.Event, o.count)
	for i := range evs {
		evs[i] = outboxrelay.Event{ID: fmt.Sprintf("%s-%d-%d", name, run, i), Topic: topic, Key: fmt.Sprintf("key-%d", i%o.keys), Payload: payload}
	}
	cstart := time.Now()
	for i := 0; i < len(evs); i += 1000 {
		if err := enqueue(ctx, evs[i:min(i+1000, len(evs))]); err != nil {
			return 0, err
		}
	}
	committed := time.Since(cstart)
	if settle != nil {
		if err := settle(); err != nil {
			return 0, err
		}
	}
	r, stop, err := startRelay("drain")
	if err != nil {
		return 0, err
	}
	select { // the lease bucket exists (the relay has not acquired the lease yet)
	case <-r.Ready():
	case <-ctx.Done():
		stop()
		return 0, ctx.Err()
	}
	start := time.Now()
	err = waitAcked(int64(o.count), 5*time.Minute)
	drain := time.Since(start)
	stop()
	if err != nil {
		return 0, err
	}
	rate := float64(o.count) / drain.Seconds()
	fmt.Fprintf(out, "bench.outbox.%s.commit_backlog_before_relay: %.3f s (%d events, %.0f events/s)\n", name, committed.Seconds(), o.count, float64(o.count)/committed.Seconds())
	fmt.Fprintf(out, "bench.outbox.%s.relay_drain_committed_backlog_msgs_per_sec: %.0f msg/s\n", name, rate)
	after, err := rawAfter()
	if err != nil {
		return 0, err
	}
	raw := (rawBefore + after) / 2
	fmt.Fprintf(out, "bench.outbox.%s.relay_drain_vs_raw_ratio: %.2f x (raw = mean of the runs before and after: %.0f msg/s)\n", name, rate/raw, raw)

	// Commit-to-ack latency at a steady commit rate.
	var commitAt sync.Map // event id -> time.Time
	var latMu sync.Mutex
	lats := make([]time.Duration, 0, o.latencyCount)
	onAck.Store(func(rec outboxrelay.Record) {
		if t, ok := commitAt.Load(rec.ID); ok {
			d := time.Since(t.(time.Time))
			latMu.Lock()
			lats = append(lats, d)
			latMu.Unlock()
		}
	})
	acked.Store(0)
	r, stop, err = startRelay("steady")
	if err != nil {
		return 0, err
	}
	defer stop()
	for !r.Leader() {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		time.Sleep(time.Millisecond)
	}
	interval := time.Second / time.Duration(o.latencyRate)
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	lstart := time.Now()
	for range o.writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= int64(o.latencyCount); i = next.Add(1) {
				time.Sleep(time.Until(lstart.Add(time.Duration(i-1) * interval)))
				ev := outboxrelay.Event{ID: fmt.Sprintf("%s-lat-%d-%d", name, run, i), Topic: topic, Key: fmt.Sprintf("key-%d", i%int64(o.keys)), Payload: payload}
				if err := enqueue(ctx, []outboxrelay.Event{ev}); err != nil {
					failed.Store(err)
					return
				}
				commitAt.Store(ev.ID, time.Now())
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return 0, err
	}
	commitRate := float64(o.latencyCount) / time.Since(lstart).Seconds()
	if err := waitAcked(int64(o.latencyCount), time.Minute); err != nil {
		return 0, err
	}
	latMu.Lock()
	defer latMu.Unlock()
	slices.Sort(lats)
	prefix := fmt.Sprintf("bench.outbox.%s.steady_%d_commits_per_sec", name, o.latencyRate)
	fmt.Fprintf(out, "%s.achieved_commits_per_sec: %.0f tx/s\n", prefix, commitRate)
	fmt.Fprintf(out, "%s.commit_to_ack_p50: %.3f ms\n", prefix, ms(bench.Percentile(lats, 0.50)))
	fmt.Fprintf(out, "%s.commit_to_ack_p99: %.3f ms\n", prefix, ms(bench.Percentile(lats, 0.99)))
	return after, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

type quietPebbleLogger struct{}

func (quietPebbleLogger) Infof(string, ...any)  {}
func (quietPebbleLogger) Errorf(string, ...any) {}
func (quietPebbleLogger) Fatalf(f string, a ...any) {
	fmt.Fprintf(os.Stderr, "pebble: "+f+"\n", a...)
	os.Exit(1)
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newBenchInboxCmd(g *globalOptions) *cobra.Command {
	o := benchOutboxOptions{}
	cmd := &cobra.Command{
		Use:   "inbox",
		Short: "Consumption through the Pebble and Postgres inboxes vs raw consume+ack",
		Long: `Publishes --count events to an R3 topic, then consumes them three times
with a fresh durable consumer each (fetch 500, explicit ack): raw ack, through
the Pebble inbox (ProcessBatch: one synced commit per fetch) and through the
Postgres inbox (ProcessBatch: one transaction per fetch). Prints msgs/s and
the inbox/raw ratios (goal >= 0.8 for Pebble).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.dsn == "" && !o.skipPostgres {
				return usageError{fmt.Errorf("--dsn is required (or --skip-postgres)")}
			}
			return runBenchInbox(cmd.Context(), cmd.OutOrStdout(), g, o)
		},
	}
	o.flags(cmd, 20000)
	cmd.Flags().BoolVar(&o.skipPostgres, "skip-postgres", false, "measure the Pebble inbox only")
	return cmd
}

func runBenchInbox(ctx context.Context, out io.Writer, g *globalOptions, o benchOutboxOptions) error {
	const topic = "bench-inbox"
	_, js, cleanup, err := benchSetup(ctx, g, o.inProcess, topic)
	if err != nil {
		return err
	}
	defer cleanup()
	payload := make([]byte, o.size)
	run := time.Now().UnixNano()
	for i := 0; i < o.count; i++ {
		msg := &nats.Msg{Subject: platform.TopicSubject(topic, fmt.Sprintf("key-%d", i%o.keys)), Data: payload}
		if _, err := js.PublishMsgAsync(msg, jetstream.WithMsgID(fmt.Sprintf("inbox-%d-%d", run, i))); err != nil {
			return err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		return fmt.Errorf("bench inbox: publishing %d events did not complete", o.count)
	}
	type mode struct {
		name    string
		process func(ctx context.Context, msgs []platform.InboxMsg) error
	}
	modes := []mode{{"raw", func(_ context.Context, msgs []platform.InboxMsg) error {
		for _, m := range msgs {
			if err := m.Ack(); err != nil {
				return err
			}
		}
		return nil
	}}}
	dir, err := os.MkdirTemp("", "platformctl-bench-pebble-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietPebbleLogger{}})
	if err != nil {
		return err
	}
	defer db.Close()
	pin, err := pebbleinbox.New(db, platform.DefaultInboxConfig("bench"), pebbleinbox.Options{})
	if err != nil {
		return err
	}
	modes = append(modes, mode{"pebble_inbox", func(ctx context.Context, msgs []platform.InboxMsg) error {
		_, _, err := pin.ProcessBatch(ctx, msgs, func(b *pebble.Batch, m platform.InboxMsg) error {
			id, _ := platform.EventIDOf(m)
			return b.Set([]byte("bench/effect/"+id), []byte("1"), nil)
		})
		return err
	}})
	if !o.skipPostgres {
		pool, cleanup, err := benchDatabase(ctx, o.dsn)
		if err != nil {
			return err
		}
		defer cleanup()
		if err := pginbox.Migrate(ctx, pool); err != nil {
			return err
		}
		if _, err := pool.Exec(ctx, `CREATE TABLE bench_effects (event_id text PRIMARY KEY)`); err != nil {
			return err
		}
		gin, err := pginbox.New(pool, platform.DefaultInboxConfig("bench"))
		if err != nil {
			return err
		}
		modes = append(modes, mode{"postgres_inbox", func(ctx context.Context, msgs []platform.InboxMsg) error {
			_, _, err := gin.ProcessBatch(ctx, msgs, func(tx pgx.Tx, m platform.InboxMsg) error {
				id, _ := platform.EventIDOf(m)
				_, err := tx.Exec(ctx, `INSERT INTO bench_effects (event_id) VALUES ($1)`, id)
				return err
			})
			return err
		}})
	}
	var rawRate float64
	for _, m := range modes {
		c, err := js.CreateOrUpdateConsumer(ctx, platform.StreamName(topic), jetstream.ConsumerConfig{
			Durable: "bench-" + m.name, AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 10000,
		})
		if err != nil {
			return err
		}
		start := time.Now()
		done := 0
		for done < o.count {
			batch, err := c.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
			if err != nil {
				return err
			}
			var msgs []platform.InboxMsg
			for msg := range batch.Messages() {
				msgs = append(msgs, msg)
			}
			if len(msgs) == 0 {
				return fmt.Errorf("bench inbox: %s: consumed %d of %d, then nothing: %v", m.name, done, o.count, batch.Error())
			}
			if err := m.process(ctx, msgs); err != nil {
				return fmt.Errorf("bench inbox: %s: %w", m.name, err)
			}
			done += len(msgs)
		}
		rate := float64(done) / time.Since(start).Seconds()
		fmt.Fprintf(out, "bench.inbox.%s.msgs_per_sec: %.0f msg/s\n", m.name, rate)
		if m.name == "raw" {
			rawRate = rate
		} else {
			fmt.Fprintf(out, "bench.inbox.%s_vs_raw_ratio: %.2f x\n", m.name, rate/rawRate)
		}
	}
	return nil
}

// benchSetup connects (or starts an in-process fabric), opens JetStream and
// creates the bench topic; cleanup drops the topic and disconnects.
func benchSetup(ctx context.Context, g *globalOptions, inProcess bool, topic string) (*nats.Conn, jetstream.JetStream, func(), error) {
	nc, closeNC, err := benchConnect(ctx, g, inProcess)
	if err != nil {
		return nil, nil, nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1024))
	if err != nil {
		closeNC()
		return nil, nil, nil, err
	}
	drop, err := benchTopic(ctx, js, topic)
	if err != nil {
		closeNC()
		return nil, nil, nil, err
	}
	return nc, js, func() { drop(); closeNC() }, nil
}
