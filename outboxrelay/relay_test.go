package outboxrelay_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/validate"
	"github.com/msgplatform/platform/outboxrelay"
)

func TestConfigValidateReportsEveryProblem(t *testing.T) {
	cfg := outboxrelay.DefaultConfig("orders-service")
	if err := cfg.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	cfg.Name = "bad name"
	cfg.BatchSize = 0
	cfg.AckTimeout = 10 * time.Millisecond
	cfg.LeaseTTL = 0
	cfg.PruneBatch = 1 << 20
	err := cfg.Validate()
	var verr *validate.Error
	if !errors.Is(err, outboxrelay.ErrInvalidConfig) || !errors.As(err, &verr) {
		t.Fatalf("want *validate.Error wrapping ErrInvalidConfig, got %v", err)
	}
	for _, k := range []string{"name", "batch_size", "ack_timeout", "lease_ttl", "prune_batch"} {
		if !verr.Has(k) {
			t.Errorf("no problem reported for %s in:\n%v", k, err)
		}
	}
}

func TestEnqueueRefusesInvalidEvents(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			for _, ev := range []outboxrelay.Event{
				{Topic: "orders", Key: "k1", Payload: []byte("x")},            // no id
				{ID: "e1", Topic: "orders", Key: "a.b", Payload: []byte("x")}, // key is not one token
				{ID: "e2", Key: "k1"}, // no topic
			} {
				if err := b.enqueue(ctx, ev); !errors.Is(err, outboxrelay.ErrInvalidEvent) {
					t.Errorf("enqueue %+v: want ErrInvalidEvent, got %v", ev, err)
				}
			}
			st, err := b.store.Stats(ctx)
			if err != nil || st.Unsent != 0 {
				t.Fatalf("after refused enqueues: %+v, %v; want nothing written", st, err)
			}
		})
	}
}

// TestCrashAfterPublishBeforeMark kills the relay after its first round was
// published and acked but before it was marked sent. The next relay
// republishes the round with the same Nats-Msg-Id: the stream drops the
// repeats, so every event is stored exactly once, in per-key order.
func TestCrashAfterPublishBeforeMark(t *testing.T) {
	f := natstest.RunFabric(t, 3)
	js := f.JetStream()
	eachBackend(t, js, "crash-", func(t *testing.T, b *backend, topic string) {
		evs := events(topic, topic, 20, 15)
		ctx := context.Background()
		for i := 0; i < len(evs); i += 10 {
			if err := b.enqueue(ctx, evs[i:i+10]...); err != nil {
				t.Fatal(err)
			}
		}
		crash := &crashOnce{}
		crash.armed.Store(true)
		cfg := testConfig(topic)
		cfg.Faults.AfterPublish = crash.hook
		_, errc := startRelay(t, f, cfg, b.store)
		select {
		case err := <-errc:
			if !errors.Is(err, outboxrelay.ErrInjectedFault) {
				t.Fatalf("relay 1 stopped with %v, want the injected fault", err)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("relay 1 never published")
		}
		if len(crash.acked) == 0 {
			t.Fatal("relay 1 crashed without publishing")
		}
		// The killed relay never released its lease: the next one
		// takes over when it expires.
		start := time.Now()
		r2, _ := startRelay(t, f, testConfig(topic), b.store)
		waitDrained(t, b.store, 30*time.Second)
		t.Logf("relay 2 drained the outbox %s after relay 1 died; %d events were published before the crash", time.Since(start).Round(time.Millisecond), len(crash.acked))
		checkDelivered(t, readStream(t, js, topic), evs, false)
		if c := r2.Counts(); c.Duplicate < uint64(len(crash.acked)) {
			t.Errorf("relay 2 counts %+v: want >= %d duplicates (the crashed round)", c, len(crash.acked))
		}
	})
}

// TestRelayMoreKeysThanInFlight: with many more keys than MaxInFlight and
// reads larger than it, every event is published once, in per-key order,
// over many refills of the publish window.
func TestRelayMoreKeysThanInFlight(t *testing.T) {
	f := natstest.RunFabric(t, 3)
	js := f.JetStream()
	b := pebbleBackend(t)
	topic := "window"
	createTopic(t, js, topic)
	evs := b.seed(t, topic, 300, 3)
	cfg := testConfig("window")
	cfg.BatchSize, cfg.MaxInFlight = 250, 16
	r, _ := startRelay(t, f, cfg, b.store)
	waitDrained(t, b.store, 30*time.Second)
	checkDelivered(t, readStream(t, js, topic), evs, false)
	if c := r.Counts(); c.OK != uint64(len(evs)) {
		t.Errorf("counts %+v, want %d ok", c, len(evs))
	}
}

// readRecorder records the limit and skip list length of every Unsent call.
type readRecorder struct {
	outboxrelay.Store
	mu    sync.Mutex
	reads [][2]int // limit, len(skip)
}

func (s *readRecorder) Unsent(ctx context.Context, limit int, skip []uint64) ([]outboxrelay.Record, error) {
	s.mu.Lock()
	s.reads = append(s.reads, [2]int{limit, len(skip)})
	s.mu.Unlock()
	return s.Store.Unsent(ctx, limit, skip)
}

// TestRelayReadsGrowWithThePipeline: a backlog is read one window
// (MaxInFlight) first, then never more than the pipeline already holds, so
// reads grow up to BatchSize and each returns while the records already
// read are still being published; every event is published once, in
// per-key order.
func TestRelayReadsGrowWithThePipeline(t *testing.T) {
	f := natstest.RunFabric(t, 3)
	js := f.JetStream()
	b := pebbleBackend(t)
	topic := "ramp"
	createTopic(t, js, topic)
	evs := b.seed(t, topic, 300, 3)
	cfg := testConfig("ramp")
	cfg.BatchSize, cfg.MaxInFlight = 250, 16
	rec := &readRecorder{Store: b.store}
	r, _ := startRelay(t, f, cfg, rec)
	waitDrained(t, b.store, 30*time.Second)
	checkDelivered(t, readStream(t, js, topic), evs, false)
	if c := r.Counts(); c.OK != uint64(len(evs)) {
		t.Errorf("counts %+v, want %d ok", c, len(evs))
	}
	rec.mu.Lock()
	reads := slices.Clone(rec.reads)
	rec.mu.Unlock()
	if len(reads) == 0 || reads[0] != [2]int{cfg.MaxInFlight, 0} {
		t.Fatalf("first read (limit, skip) = %v, want [%d 0]", reads[:min(1, len(reads))], cfg.MaxInFlight)
	}
	reachedBatch := false
	for i, rd := range reads {
		if want := min(cfg.BatchSize, max(cfg.MaxInFlight, rd[1])); rd[0] != want {
			t.Errorf("read %d: limit %d with %d records held, want %d (reads %v)", i, rd[0], rd[1], want, reads)
		}
		reachedBatch = reachedBatch || rd[0] == cfg.BatchSize
	}
	if !reachedBatch {
		t.Errorf("no read reached BatchSize %d: %v", cfg.BatchSize, reads)
	}
}
