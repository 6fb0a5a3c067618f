package outboxrelay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/outboxrelay"
	"github.com/msgplatform/platform/platform"
)

// TestFastBatchPoisonEvent: an event its stream refuses (over the
// stream's max message size) in the middle of a batched backlog ends its
// batch; the events after it in the batch are republished singly, so every
// other key's events are all stored, in order, once; the refused event's
// key stops there (its later events wait, per-key order), counted as
// errors, and the relay goes on.
func TestFastBatchPoisonEvent(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	topic := "poison"
	fx.createTopic(t, topic)
	scfg := natstest.StreamConfig(t, fx.js, platform.StreamName(topic))
	scfg.MaxMsgSize = 4096
	if _, err := fx.js.UpdateStream(ctx, scfg); err != nil {
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
	r, _ := fx.startRelay(t, cfg, b.store)
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
	msgs := fx.readStream(t, topic)
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
	fx := newFixture(t)
	ctx := context.Background()
	if _, err := fx.js.CreateStream(ctx, jetstream.StreamConfig{Name: "plain", Subjects: []string{"plain.*"}, Replicas: 3, Duplicates: time.Minute}); err != nil {
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
	r, _ := fx.startRelay(t, cfg, b.store)
	waitDrained(t, b.store, 60*time.Second)
	c := r.Counts()
	if c.Batched != 0 || c.BatchRetried == 0 {
		t.Errorf("counts %+v: want the refused batch's events retried singly and none stored batched", c)
	}
	if c.OK+c.Duplicate != uint64(len(evs)) || c.Error+c.Unknown != 0 {
		t.Errorf("counts %+v, want %d ok", c, len(evs))
	}
	st, err := fx.js.Stream(ctx, "plain")
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Msgs; n != uint64(len(evs)) {
		t.Errorf("stream holds %d messages, want %d", n, len(evs))
	}
}
