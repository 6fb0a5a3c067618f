package outboxrelay_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/pgtest"
	"github.com/msgplatform/platform/outboxrelay"
	"github.com/msgplatform/platform/outboxrelay/pebbleoutbox"
	"github.com/msgplatform/platform/outboxrelay/pgoutbox"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/platform/inbox/pebbleinbox"
	"github.com/msgplatform/platform/platform/inbox/pginbox"
)

// backend is one outbox implementation with a service writing to it: each
// enqueue is one service transaction holding a business write and the
// event, and an inbox-guarded consumer effect in the same database.
type backend struct {
	name    string
	store   outboxrelay.Store
	enqueue func(ctx context.Context, evs ...outboxrelay.Event) error
	// consume applies the effect of msg once through the backend's inbox.
	consume func(ctx context.Context, msg platform.InboxMsg) (platform.InboxOutcome, error)
	// effects returns how many effects ran and for how many distinct ids.
	effects func() (total, distinct int)
}

func backends(t *testing.T) []*backend {
	return []*backend{pgBackend(t), pebbleBackend(t)}
}

func pgBackend(t *testing.T) *backend {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if err := pgoutbox.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if err := pginbox.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE app_orders (id text PRIMARY KEY, body bytea);
CREATE TABLE app_effects (event_id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	in, err := pginbox.New(pool, platform.DefaultInboxConfig("test-consumer"))
	if err != nil {
		t.Fatal(err)
	}
	return &backend{
		name:  "postgres",
		store: pgoutbox.New(pool),
		enqueue: func(ctx context.Context, evs ...outboxrelay.Event) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				for _, ev := range evs {
					if _, err := tx.Exec(ctx, `INSERT INTO app_orders (id, body) VALUES ($1, $2)`, ev.ID, ev.Payload); err != nil {
						return err
					}
					if err := pgoutbox.Enqueue(ctx, tx, ev); err != nil {
						return err
					}
				}
				return nil
			})
		},
		consume: func(ctx context.Context, msg platform.InboxMsg) (platform.InboxOutcome, error) {
			id, _ := platform.EventIDOf(msg)
			return in.Process(ctx, msg, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, `INSERT INTO app_effects (event_id) VALUES ($1)`, id)
				return err
			})
		},
		effects: func() (int, int) {
			var total, distinct int
			if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT event_id) FROM app_effects`).Scan(&total, &distinct); err != nil {
				t.Errorf("count effects: %v", err)
			}
			return total, distinct
		},
	}
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(f string, a ...any) {
	panic(fmt.Sprintf(f, a...))
}

func pebbleBackend(t *testing.T) *backend {
	t.Helper()
	db, err := pebble.Open(t.TempDir(), &pebble.Options{Logger: quietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	store, err := pebbleoutbox.Open(db, pebbleoutbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	in, err := pebbleinbox.New(db, platform.DefaultInboxConfig("test-consumer"), pebbleinbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var effectSeq atomic.Uint64
	// Close the database after every relay using it (cleanups run LIFO,
	// relays register theirs later).
	t.Cleanup(func() { _ = db.Close() })
	return &backend{
		name:  "pebble",
		store: store,
		enqueue: func(_ context.Context, evs ...outboxrelay.Event) error {
			return store.Update(func(b *pebble.Batch) error {
				for _, ev := range evs {
					if err := b.Set([]byte("app/orders/"+ev.ID), ev.Payload, nil); err != nil {
						return err
					}
					if err := store.Enqueue(b, ev); err != nil {
						return err
					}
				}
				return nil
			})
		},
		consume: func(ctx context.Context, msg platform.InboxMsg) (platform.InboxOutcome, error) {
			id, _ := platform.EventIDOf(msg)
			return in.Process(ctx, msg, func(b *pebble.Batch) error {
				return b.Set([]byte(fmt.Sprintf("app/effects/%s/%d", id, effectSeq.Add(1))), nil, nil)
			})
		},
		effects: func() (int, int) {
			it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte("app/effects/"), UpperBound: []byte("app/effects0")})
			if err != nil {
				t.Errorf("count effects: %v", err)
				return 0, 0
			}
			defer it.Close()
			ids := map[string]bool{}
			total := 0
			for ok := it.First(); ok; ok = it.Next() {
				k := strings.TrimPrefix(string(it.Key()), "app/effects/")
				ids[k[:strings.LastIndexByte(k, '/')]] = true
				total++
			}
			return total, len(ids)
		},
	}
}

// testConfig is a relay config with short timings for tests.
func testConfig(name string) outboxrelay.Config {
	cfg := outboxrelay.DefaultConfig(name)
	cfg.BatchSize = 100
	cfg.AckTimeout = 2 * time.Second
	cfg.LeaseTTL = time.Second
	cfg.PollInterval = 10 * time.Millisecond
	cfg.BackoffMin = 50 * time.Millisecond
	cfg.BackoffMax = time.Second
	cfg.StatsInterval = 200 * time.Millisecond
	return cfg
}

// fixture is what a relay test runs on: a 3-node fabric and a JetStream
// client of it.
type fixture struct {
	*natstest.Fabric
	js jetstream.JetStream
}

// newFixture starts a 3-node fabric, shut down when t ends.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := natstest.RunFabric(t, 3)
	return &fixture{Fabric: f, js: f.JetStream()}
}

// startRelay starts a relay on the fabric and closes it when the test
// ends; errc gets Run's result.
func (fx *fixture) startRelay(t *testing.T, cfg outboxrelay.Config, store outboxrelay.Store) (*outboxrelay.Relay, <-chan error) {
	t.Helper()
	r, err := outboxrelay.New(cfg, store, fx.Conn(nats.ReconnectBufSize(-1)))
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { errc <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		cctx, c2 := context.WithTimeout(context.Background(), 5*time.Second)
		defer c2()
		_ = r.Close(cctx)
	})
	return r, errc
}

// createTopic creates an R3 topic with 4 partitions.
func (fx *fixture) createTopic(t *testing.T, name string) {
	t.Helper()
	spec := platform.DefaultTopicSpec(name)
	spec.Partitions = 4
	spec.Retention = platform.Retention{MaxAge: time.Hour}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := catalog.NewReconciler(fx.js, catalog.ReconcilerOptions{}).ApplyTopic(ctx, spec, catalog.ApplyOptions{}); err != nil {
		t.Fatalf("create topic %s: %v", name, err)
	}
}

// seed enqueues in b's outbox, perTx events a transaction, the
// keys*perKey events that events returns for topic, and returns them.
func (b *backend) seed(t *testing.T, topic string, keys, perKey, perTx int) []outboxrelay.Event {
	t.Helper()
	evs := events(topic, topic, keys, perKey)
	b.enqueueTx(t, evs, perTx)
	return evs
}

// enqueueTx enqueues evs in b's outbox in order, perTx events a
// transaction (the last one holds the rest).
func (b *backend) enqueueTx(t *testing.T, evs []outboxrelay.Event, perTx int) {
	t.Helper()
	for chunk := range slices.Chunk(evs, perTx) {
		if err := b.enqueue(context.Background(), chunk...); err != nil {
			t.Fatal(err)
		}
	}
}

// eachBackend runs f as a subtest per backend, named for it, with the
// topic prefix+b.name created (as createTopic).
func (fx *fixture) eachBackend(t *testing.T, prefix string, f func(t *testing.T, b *backend, topic string)) {
	t.Helper()
	fx.onBackends(t, prefix, backends(t), f)
}

// onBackends is eachBackend over the backends bs.
func (fx *fixture) onBackends(t *testing.T, prefix string, bs []*backend, f func(t *testing.T, b *backend, topic string)) {
	t.Helper()
	for _, b := range bs {
		t.Run(b.name, func(t *testing.T) {
			topic := prefix + b.name
			fx.createTopic(t, topic)
			f(t, b, topic)
		})
	}
}

// events returns keys*perKey events for topic, key i's n-th event with id
// "<prefix>-k<i>-<n>" and payload "k<i>:<n>", in round-robin order.
func events(prefix, topic string, keys, perKey int) []outboxrelay.Event {
	var out []outboxrelay.Event
	for n := range perKey {
		for k := range keys {
			key := fmt.Sprintf("k%d", k)
			out = append(out, outboxrelay.Event{
				ID: fmt.Sprintf("%s-%s-%d", prefix, key, n), Topic: topic, Key: key,
				Headers: nats.Header{"X-Test": []string{prefix}},
				Payload: []byte(fmt.Sprintf("%s:%d", key, n)),
			})
		}
	}
	return out
}

// stored is one message read back from a topic's stream.
type stored struct {
	id, key string
	n       int
}

// readStream reads every message of topic's stream in stream order.
func (fx *fixture) readStream(t *testing.T, topic string) []stored {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := fx.js.Stream(ctx, platform.StreamName(topic))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	total := int(info.State.Msgs)
	if total == 0 {
		return nil
	}
	var out []stored
	var next uint64 = 1
	for failures := 0; len(out) < total; failures++ {
		if failures > 20 {
			t.Fatalf("read %d of %d messages", len(out), total)
		}
		c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: next})
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		batch, err := c.Fetch(min(1000, total-len(out)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		before := len(out)
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				t.Fatal(err)
			}
			next = md.Sequence.Stream + 1
			key, n, _ := strings.Cut(string(m.Data()), ":")
			i, _ := strconv.Atoi(n)
			out = append(out, stored{id: m.Headers().Get(jetstream.MsgIDHeader), key: key, n: i})
		}
		if len(out) > before {
			failures = -1
		}
	}
	return out
}

// checkDelivered asserts every event is in the stream, each key's events
// first appear in order 0..n-1, and (if !dupsAllowed) none twice. It
// returns how many duplicates the stream holds.
func checkDelivered(t *testing.T, msgs []stored, want []outboxrelay.Event, dupsAllowed bool) int {
	t.Helper()
	seen := map[string]bool{}
	next := map[string]int{}
	dups := 0
	for _, m := range msgs {
		if seen[m.id] {
			dups++
			continue
		}
		seen[m.id] = true
		if m.n != next[m.key] {
			t.Errorf("key %s: event %d arrived when %d was next (order broken)", m.key, m.n, next[m.key])
		}
		next[m.key] = m.n + 1
	}
	lost := 0
	for _, ev := range want {
		if !seen[ev.ID] {
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d events lost", lost, len(want))
	}
	if dups > 0 && !dupsAllowed {
		t.Errorf("%d duplicates in the stream", dups)
	}
	return dups
}

// deliveredOnce waits until store has no unsent event and asserts topic's
// stream holds every one of evs once, each key's in order.
func (fx *fixture) deliveredOnce(t *testing.T, store outboxrelay.Store, topic string, evs []outboxrelay.Event, relays ...*outboxrelay.Relay) {
	t.Helper()
	waitDrained(t, store, 60*time.Second, relays...)
	checkDelivered(t, fx.readStream(t, topic), evs, false)
}

// waitDrained waits until the store has no unsent event.
func waitDrained(t *testing.T, store outboxrelay.Store, timeout time.Duration, relays ...*outboxrelay.Relay) {
	t.Helper()
	natstest.WaitFor(t, timeout, func() error {
		st, err := store.Stats(context.Background())
		if err != nil {
			return err
		}
		if st.Unsent > 0 {
			// What the relays were doing, should the wait time out.
			var rs []string
			for i, r := range relays {
				rs = append(rs, fmt.Sprintf("relay %d: leader %v, counts %+v", i, r.Leader(), r.Counts()))
			}
			return fmt.Errorf("%d unsent (%+v) %s", st.Unsent, st, strings.Join(rs, "; "))
		}
		return nil
	})
}

// waitKilled waits until errc, relay r's Run result, reports the injected
// fault, and fails t if it reports anything else or nothing within timeout.
func waitKilled(t *testing.T, errc <-chan error, timeout time.Duration, r *outboxrelay.Relay) {
	t.Helper()
	select {
	case err := <-errc:
		if !errors.Is(err, outboxrelay.ErrInjectedFault) {
			t.Fatalf("relay stopped with %v, want the injected fault", err)
		}
	case <-time.After(timeout):
		t.Fatalf("relay was never killed; counts %+v", r.Counts())
	}
}

// crashOnce is an AfterPublish hook that kills the relay on its first
// call once armed.
type crashOnce struct {
	armed atomic.Bool
	fired atomic.Bool
	mu    sync.Mutex
	acked []outboxrelay.Record
}

func (c *crashOnce) hook(acked []outboxrelay.Record) error {
	if c.armed.Load() && c.fired.CompareAndSwap(false, true) {
		c.mu.Lock()
		c.acked = append(c.acked, acked...)
		c.mu.Unlock()
		return errors.New("killed after publish, before mark")
	}
	return nil
}
