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

// TestCrashAfterDuplicateWindow: the relay dies after publishing and before
// marking, and the next one republishes after the stream's duplicate
// window has passed, so the stream stores the repeats. The consumer's
// inbox catches them: every effect runs exactly once.
func TestCrashAfterDuplicateWindow(t *testing.T) {
	f := natstest.RunFabric(t, 3)
	js := f.JetStream()
	eachBackend(t, js, "window-", func(t *testing.T, b *backend, topic string) {
		setDuplicateWindow(t, js, topic, time.Second)
		evs := events(topic, topic, 10, 20)
		ctx := context.Background()
		for i := 0; i < len(evs); i += 20 {
			if err := b.enqueue(ctx, evs[i:i+20]...); err != nil {
				t.Fatal(err)
			}
		}
		crash := &crashOnce{}
		crash.armed.Store(true)
		cfg := testConfig(topic)
		cfg.Faults.AfterPublish = crash.hook
		_, errc := startRelay(t, f, cfg, b.store)
		if err := <-errc; !errors.Is(err, outboxrelay.ErrInjectedFault) {
			t.Fatalf("relay 1: %v", err)
		}
		time.Sleep(1500 * time.Millisecond) // the window passes (the lease expires meanwhile too)
		startRelay(t, f, testConfig(topic), b.store)
		waitDrained(t, b.store, 30*time.Second)
		streamDups := checkDelivered(t, readStream(t, js, topic), evs, true)
		if streamDups < len(crash.acked) {
			t.Fatalf("stream holds %d duplicates, want %d (the republished round): the window did not pass", streamDups, len(crash.acked))
		}
		inboxDups := consumeAll(t, js, b, topic, len(evs), nil)
		total, distinct := b.effects()
		t.Logf("stream duplicates %d, skipped by the inbox %d, effects %d for %d events", streamDups, inboxDups, total, len(evs))
		if total != len(evs) || distinct != len(evs) {
			t.Errorf("effects: %d runs for %d distinct events, want %d and %d", total, distinct, len(evs), len(evs))
		}
		if inboxDups < streamDups {
			t.Errorf("inbox skipped %d, want >= %d", inboxDups, streamDups)
		}
	})
}

func setDuplicateWindow(t *testing.T, js jetstream.JetStream, topic string, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, platform.StreamName(topic))
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.Duplicates = d
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
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
	f := natstest.RunFabric(t, 3)
	js := f.JetStream()
	eachBackend(t, js, "consumer-", func(t *testing.T, b *backend, topic string) {
		pub := platform.NewPublisher(js, platform.PublisherOptions{})
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
		consumeAll(t, js, b, topic, len(evs), crashFirst)
		// Wait for the redeliveries of the unacked deliveries.
		skipped := 0
		natstest.WaitFor(t, 30*time.Second, func() error {
			dups := consumeOnce(t, js, b, topic)
			skipped += dups
			info, err := consumerInfo(js, topic)
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
