package outboxrelay_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/outboxrelay"
	"github.com/msgplatform/platform/platform"
)

// TestFastBatchBacklog: a backlog (many keys ready at once) goes in fast
// batches; every event is stored once, each key in order, and the
// batches' acks count as ok.
func TestFastBatchBacklog(t *testing.T) {
	f := natstest.RunFabric(t, 3)
	js := f.JetStream()
	eachBackend(t, js, "batched-", func(t *testing.T, b *backend, topic string) {
		evs := b.seed(t, topic, 200, 10)
		cfg := testConfig(topic)
		cfg.BatchSize, cfg.MaxInFlight = 500, 128
		r, _ := startRelay(t, f, cfg, b.store)
		waitDrained(t, b.store, 60*time.Second)
		checkDelivered(t, readStream(t, js, topic), evs, false)
		c := r.Counts()
		if c.OK != uint64(len(evs)) || c.Duplicate+c.Error+c.Unknown != 0 {
			t.Errorf("counts %+v, want %d ok and nothing else", c, len(evs))
		}
		// The first read (one window) goes singly, the rest mostly batched.
		if c.Batched < uint64(len(evs)/2) {
			t.Errorf("only %d of %d events went in fast batches (counts %+v)", c.Batched, len(evs), c)
		}
	})
}

// TestFastBatchSinglePublishes: with SinglePublishes nothing is batched.
func TestFastBatchSinglePublishes(t *testing.T) {
	f := natstest.RunFabric(t, 3)
	js := f.JetStream()
	b := pebbleBackend(t)
	topic := "single"
	createTopic(t, js, topic)
	evs := b.seed(t, topic, 200, 3)
	cfg := testConfig(topic)
	cfg.BatchSize, cfg.MaxInFlight, cfg.SinglePublishes = 500, 64, true
	r, _ := startRelay(t, f, cfg, b.store)
	waitDrained(t, b.store, 60*time.Second)
	checkDelivered(t, readStream(t, js, topic), evs, false)
	if c := r.Counts(); c.OK != uint64(len(evs)) || c.Batched+c.BatchRetried != 0 {
		t.Errorf("counts %+v, want %d ok, none batched", c, len(evs))
	}
}

// TestFastBatchPoisonEvent: an event its stream refuses (over the
// stream's max message size) in the middle of a batched backlog ends its
// batch; the events after it in the batch are republished singly, so every
// other key's events are all stored, in order, once; the refused event's
// key stops there (its later events wait, per-key order), counted as
// errors, and the relay goes on.
func TestFastBatchPoisonEvent(t *testing.T) {
	f := natstest.RunFabric(t, 3)
	js := f.JetStream()
	ctx := context.Background()
	topic := "poison"
	createTopic(t, js, topic)
	st, err := js.Stream(ctx, platform.StreamName(topic))
	if err != nil {
		t.Fatal(err)
	}
	scfg := st.CachedInfo().Config
	scfg.MaxMsgSize = 4096
	if _, err := js.UpdateStream(ctx, scfg); err != nil {
		t.Fatal(err)
	}
	b := pebbleBackend(t)
	evs := events(topic, topic, 100, 6)
	// Event 2 of key k7 (past the first read of 64) is too large.
	var poison int
	for i, ev := range evs {
		if ev.Key == "k7" && strings.HasSuffix(ev.ID, "-2") {
			poison = i
			evs[i].Payload = []byte("k7:2" + strings.Repeat(" ", 8000))
		}
	}
	if err := b.enqueue(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(topic)
	cfg.BatchSize, cfg.MaxInFlight = 300, 64
	r, _ := startRelay(t, f, cfg, b.store)
	var want []outboxrelay.Event
	for _, ev := range evs {
		if ev.Key != "k7" {
			want = append(want, ev)
		}
	}
	natstest.WaitFor(t, 60*time.Second, func() error {
		if c := r.Counts(); c.OK+c.Duplicate < uint64(len(want)+2) {
			return fmt.Errorf("counts %+v, want >= %d ok or duplicate", c, len(want)+2)
		}
		return nil
	})
	natstest.WaitFor(t, 10*time.Second, func() error {
		if c := r.Counts(); c.Error == 0 {
			return fmt.Errorf("the refused event is not counted as an error yet: %+v", c)
		}
		return nil
	})
	msgs := readStream(t, js, topic)
	checkDelivered(t, msgs, append(want, evs[poison-200], evs[poison-100]), false)
	for _, m := range msgs {
		if m.key == "k7" && m.n >= 2 {
			t.Errorf("k7 event %d stored although k7:2 was refused (per-key order)", m.n)
		}
	}
	c := r.Counts()
	if c.Batched == 0 || c.BatchRetried == 0 {
		t.Errorf("counts %+v: want events stored in batches and some retried singly after the refused one ended its batch", c)
	}
	t.Logf("counts %+v", c)
}

// TestFastBatchRefusedByStream: a topic whose stream does not allow
// batches (TopicMap to a stream made without allow_batched) gets every
// event by single publishes after the first batch is refused.
func TestFastBatchRefusedByStream(t *testing.T) {
	f := natstest.RunFabric(t, 3)
	js := f.JetStream()
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "plain", Subjects: []string{"plain.*"}, Replicas: 3, Duplicates: time.Minute}); err != nil {
		t.Fatal(err)
	}
	b := pebbleBackend(t)
	evs := events("plain", "logical", 200, 3)
	if err := b.enqueue(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig("plain")
	cfg.BatchSize, cfg.MaxInFlight = 500, 64
	cfg.TopicMap = map[string]string{"logical": "plain"}
	r, _ := startRelay(t, f, cfg, b.store)
	waitDrained(t, b.store, 60*time.Second)
	c := r.Counts()
	if c.Batched != 0 || c.BatchRetried == 0 {
		t.Errorf("counts %+v: want the refused batch's events retried singly and none stored batched", c)
	}
	if c.OK+c.Duplicate != uint64(len(evs)) || c.Error+c.Unknown != 0 {
		t.Errorf("counts %+v, want %d ok", c, len(evs))
	}
	st, err := js.Stream(ctx, "plain")
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Msgs; n != uint64(len(evs)) {
		t.Errorf("stream holds %d messages, want %d", n, len(evs))
	}
}

// TestFastBatchCrashAfterPublishBeforeMark: the relay is killed after
// events stored through fast batches were acked and before they are
// marked; the next relay republishes them (same Nats-Msg-Id) and the
// stream keeps each event once, every key in order.
func TestFastBatchCrashAfterPublishBeforeMark(t *testing.T) {
	f := natstest.RunFabric(t, 3)
	js := f.JetStream()
	eachBackend(t, js, "batchcrash-", func(t *testing.T, b *backend, topic string) {
		evs := b.seed(t, topic, 200, 10)
		var r1 atomic.Pointer[outboxrelay.Relay]
		var crashedAt atomic.Uint64
		cfg := testConfig(topic)
		cfg.BatchSize, cfg.MaxInFlight = 500, 128
		cfg.Faults.AfterPublish = func(acked []outboxrelay.Record) error {
			if r := r1.Load(); r != nil && r.Counts().Batched >= 300 && crashedAt.CompareAndSwap(0, r.Counts().Batched) {
				return errors.New("killed after batched publishes, before mark")
			}
			return nil
		}
		r, errc := startRelay(t, f, cfg, b.store)
		r1.Store(r)
		select {
		case err := <-errc:
			if !errors.Is(err, outboxrelay.ErrInjectedFault) {
				t.Fatalf("relay 1 stopped with %v, want the injected fault", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("relay 1 never crashed; counts %+v", r.Counts())
		}
		cfg2 := testConfig(topic)
		cfg2.BatchSize, cfg2.MaxInFlight = 500, 128
		r2, _ := startRelay(t, f, cfg2, b.store)
		waitDrained(t, b.store, 60*time.Second)
		checkDelivered(t, readStream(t, js, topic), evs, false)
		c1, c2 := r.Counts(), r2.Counts()
		if c1.Batched < 300 {
			t.Errorf("relay 1 counts %+v: want >= 300 stored through batches before the crash", c1)
		}
		if c2.OK+c2.Duplicate+c1.OK+c1.Duplicate < uint64(len(evs)) {
			t.Errorf("counts %+v then %+v: fewer acks than events", c1, c2)
		}
		t.Logf("relay 1 crashed after %d batched acks (counts %+v); relay 2 counts %+v", crashedAt.Load(), c1, c2)
	})
}
