package outboxrelay_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/outboxrelay"
	"github.com/msgplatform/platform/platform"
)

// consumeAll consumes topic with a durable consumer through b's inbox
// until want distinct effects ran. ack, if set, replaces the ack of each
// delivery (to simulate a crash before it).
func consumeAll(t *testing.T, js jetstream.JetStream, b *backend, topic string, want int, wrap func(jetstream.Msg) platform.InboxMsg) (dups int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := js.CreateOrUpdateConsumer(ctx, platform.StreamName(topic), jetstream.ConsumerConfig{
		Durable: "test-consumer", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Second, MaxAckPending: 1000,
	})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, distinct := b.effects(); distinct >= want {
			return dups
		}
		if ctx.Err() != nil {
			_, distinct := b.effects()
			t.Fatalf("only %d of %d effects after 60s", distinct, want)
		}
		batch, err := c.Fetch(200, jetstream.FetchMaxWait(300*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			var msg platform.InboxMsg = m
			if wrap != nil {
				msg = wrap(m)
			}
			out, err := b.consume(ctx, msg)
			var ackErr *platform.InboxAckError
			if err != nil && !errors.As(err, &ackErr) {
				t.Fatalf("process: %v", err)
			}
			if out == platform.InboxDuplicate {
				dups++
			}
		}
	}
}

// crashCase is one way of killing a relay between publish and mark.
type crashCase struct {
	name   string
	prefix string // of the topic's name
	// keys*perKey events, committed perTx events a transaction.
	keys, perKey, perTx int
	// tune adjusts both relays' configs.
	tune func(cfg *outboxrelay.Config)
	// killWhen reports whether relay 1 dies at this round of acks; nil
	// kills it at its first.
	killWhen func(r1 *outboxrelay.Relay) bool
	// window, if set, is the stream's duplicate window, and relay 2
	// starts after it passed: the stream stores the republished events.
	window time.Duration
	// check asserts what the case adds to "every event stored, in per-key
	// order, and (window unset) once".
	check func(t *testing.T, c crashRun)
}

// crashRun is what one crashCase run did.
type crashRun struct {
	fx         *fixture
	b          *backend
	topic      string
	evs        []outboxrelay.Event
	r1, r2     *outboxrelay.Relay
	acked      []outboxrelay.Record // acked by relay 1 in its fatal round
	streamDups int
}

// TestCrashBetweenPublishAndMark kills a relay after a round of events was
// published and acked but before it was marked sent. The killed relay never
// released its lease: the next one takes over when it expires and
// republishes the round with the same Nats-Msg-Id. Within the stream's
// duplicate window the stream drops the repeats, so every event is stored
// exactly once, in per-key order; after it, the consumer's inbox catches
// them and every effect runs exactly once.
func TestCrashBetweenPublishAndMark(t *testing.T) {
	fx := newFixture(t)
	for _, tc := range []crashCase{{
		name: "FirstRound", prefix: "crash-", keys: 20, perKey: 15, perTx: 10,
		check: func(t *testing.T, c crashRun) {
			if n := c.r2.Counts().Duplicate; n < uint64(len(c.acked)) {
				t.Errorf("relay 2 counts %+v: want >= %d duplicates (the crashed round)", c.r2.Counts(), len(c.acked))
			}
		},
	}, {
		// Events stored through fast batches.
		name: "FastBatches", prefix: "batchcrash-", keys: 200, perKey: 10, perTx: 2000,
		tune:     func(cfg *outboxrelay.Config) { cfg.BatchSize, cfg.MaxInFlight = 500, 128 },
		killWhen: func(r1 *outboxrelay.Relay) bool { return r1.Counts().Batched >= 300 },
		check: func(t *testing.T, c crashRun) {
			c1, c2 := c.r1.Counts(), c.r2.Counts()
			if c1.Batched < 300 {
				t.Errorf("relay 1 counts %+v: want >= 300 stored through batches before the crash", c1)
			}
			if c2.OK+c2.Duplicate+c1.OK+c1.Duplicate < uint64(len(c.evs)) {
				t.Errorf("counts %+v then %+v: fewer acks than events", c1, c2)
			}
		},
	}, {
		name: "AfterDuplicateWindow", prefix: "window-", keys: 10, perKey: 20, perTx: 20, window: time.Second,
		check: func(t *testing.T, c crashRun) {
			if c.streamDups < len(c.acked) {
				t.Fatalf("stream holds %d duplicates, want %d (the republished round): the window did not pass", c.streamDups, len(c.acked))
			}
			inboxDups := consumeAll(t, c.fx.js, c.b, c.topic, len(c.evs), nil)
			total, distinct := c.b.effects()
			t.Logf("stream duplicates %d, skipped by the inbox %d, effects %d for %d events", c.streamDups, inboxDups, total, len(c.evs))
			if total != len(c.evs) || distinct != len(c.evs) {
				t.Errorf("effects: %d runs for %d distinct events, want %d and %d", total, distinct, len(c.evs), len(c.evs))
			}
			if inboxDups < c.streamDups {
				t.Errorf("inbox skipped %d, want >= %d", inboxDups, c.streamDups)
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			fx.eachBackend(t, tc.prefix, func(t *testing.T, b *backend, topic string) {
				runCrashCase(t, tc, crashRun{fx: fx, b: b, topic: topic})
			})
		})
	}
}

// runCrashCase runs tc against c.b and c.topic: relay 1 is killed as tc
// says, relay 2 drains the outbox, and the stream holds every event.
func runCrashCase(t *testing.T, tc crashCase, c crashRun) {
	t.Helper()
	if tc.window > 0 {
		setDuplicateWindow(t, c.fx.js, c.topic, tc.window)
	}
	c.evs = c.b.seed(t, c.topic, tc.keys, tc.perKey, tc.perTx)
	config := func() outboxrelay.Config {
		cfg := testConfig(c.topic)
		if tc.tune != nil {
			tc.tune(&cfg)
		}
		return cfg
	}
	crash := &crashOnce{}
	crash.armed.Store(tc.killWhen == nil)
	var r1 atomic.Pointer[outboxrelay.Relay]
	cfg := config()
	cfg.Faults.AfterPublish = func(acked []outboxrelay.Record) error {
		if r := r1.Load(); r != nil && tc.killWhen != nil && tc.killWhen(r) {
			crash.armed.Store(true)
		}
		return crash.hook(acked)
	}
	r, errc := c.fx.startRelay(t, cfg, c.b.store)
	r1.Store(r)
	waitKilled(t, errc, 30*time.Second, r)
	c.r1, c.acked = r, crash.acked
	if len(c.acked) == 0 {
		t.Fatal("relay 1 crashed without publishing")
	}
	if tc.window > 0 {
		time.Sleep(tc.window + 500*time.Millisecond) // the window passes (the lease expires meanwhile too)
	}
	start := time.Now()
	c.r2, _ = c.fx.startRelay(t, config(), c.b.store)
	waitDrained(t, c.b.store, 60*time.Second)
	t.Logf("relay 2 drained the outbox %s after relay 1 died; %d events were published in its fatal round (relay 1 counts %+v, relay 2 counts %+v)",
		time.Since(start).Round(time.Millisecond), len(c.acked), c.r1.Counts(), c.r2.Counts())
	c.streamDups = checkDelivered(t, c.fx.readStream(t, c.topic), c.evs, tc.window > 0)
	tc.check(t, c)
}

// setDuplicateWindow sets the duplicate window of topic's stream to d.
func setDuplicateWindow(t *testing.T, js jetstream.JetStream, topic string, d time.Duration) {
	t.Helper()
	cfg := natstest.StreamConfig(t, js, platform.StreamName(topic))
	cfg.Duplicates = d
	if _, err := js.UpdateStream(natstest.Context(t, 10*time.Second), cfg); err != nil {
		t.Fatalf("set duplicate window: %v", err)
	}
}

// noAckMsg is a delivery whose consumer dies after the effect committed
// and before the ack: Ack does nothing, so the broker redelivers it.
type noAckMsg struct{ jetstream.Msg }

func (noAckMsg) Ack() error { return nil }

// TestConsumerCrashAfterEffectBeforeAck: the first delivery of every event
// commits its effect and then "crashes" before acking; the redeliveries
// after AckWait are skipped by the inbox (and acked).
func TestConsumerCrashAfterEffectBeforeAck(t *testing.T) {
	fx := newFixture(t)
	fx.eachBackend(t, "consumer-", func(t *testing.T, b *backend, topic string) {
		pub := platform.NewPublisher(fx.js, platform.PublisherOptions{})
		evs := events(topic, topic, 10, 10)
		ctx := context.Background()
		for _, ev := range evs {
			if _, err := pub.Publish(ctx, platform.Event{ID: ev.ID, Topic: ev.Topic, Key: ev.Key, Payload: ev.Payload}); err != nil {
				t.Fatal(err)
			}
		}
		var crashed sync.Map
		var crashes atomic.Int64
		crashFirst := func(m jetstream.Msg) platform.InboxMsg {
			id := m.Headers().Get(jetstream.MsgIDHeader)
			if _, loaded := crashed.LoadOrStore(id, true); !loaded {
				crashes.Add(1)
				return noAckMsg{m}
			}
			return m
		}
		consumeAll(t, fx.js, b, topic, len(evs), crashFirst)
		// Wait for the redeliveries of the unacked deliveries.
		skipped := 0
		natstest.WaitFor(t, 30*time.Second, func() error {
			dups := consumeOnce(t, fx.js, b, topic)
			skipped += dups
			info, err := consumerInfo(fx.js, topic)
			if err != nil {
				return err
			}
			if info.NumAckPending > 0 || info.NumPending > 0 {
				return fmt.Errorf("%d ack pending, %d pending (skipped %d)", info.NumAckPending, info.NumPending, dups)
			}
			return nil
		})
		total, distinct := b.effects()
		if total != len(evs) || distinct != len(evs) {
			t.Errorf("effects: %d runs for %d distinct events, want %d each", total, distinct, len(evs))
		}
		if skipped < int(crashes.Load()) {
			t.Errorf("inbox skipped %d redeliveries, want >= %d (one per crashed delivery)", skipped, crashes.Load())
		}
		t.Logf("%d deliveries crashed before the ack, %d redeliveries skipped; effects %d for %d events", crashes.Load(), skipped, total, len(evs))
	})
}

func consumeOnce(t *testing.T, js jetstream.JetStream, b *backend, topic string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, platform.StreamName(topic), "test-consumer")
	if err != nil {
		t.Fatal(err)
	}
	batch, err := c.Fetch(200, jetstream.FetchMaxWait(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	dups := 0
	for m := range batch.Messages() {
		if out, err := b.consume(ctx, m); err == nil && out == platform.InboxDuplicate {
			dups++
		}
	}
	return dups
}

func consumerInfo(js jetstream.JetStream, topic string) (*jetstream.ConsumerInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, platform.StreamName(topic), "test-consumer")
	if err != nil {
		return nil, err
	}
	return c.Info(ctx)
}
