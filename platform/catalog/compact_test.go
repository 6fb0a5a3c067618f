package catalog

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/platform"
)

// lastByKey returns the stored events of a key (oldest first).
func storedFor(t *testing.T, js jetstream.JetStream, topic platform.TopicSpec, key string) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := natstest.Context(t, 10*time.Second)
	s, err := js.Stream(ctx, platform.StreamName(topic.Name))
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	subj := platform.StoredSubject(topic.Name, key, topic.Partitions)
	for seq := uint64(1); ; {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
		seq = m.Sequence + 1
	}
}

func TestCompactedTopicKeepsLatestPerKeyAndHonoursTombstones(t *testing.T) {
	rec, _, js, ctx := onFabric(t, 1)

	topic := platform.DefaultTopicSpec("profiles")
	topic.Partitions = 2
	topic.Replicas = 1
	topic.Cleanup = platform.CleanupCompact
	topic.TombstoneRetention = time.Second
	ch, err := rec.ApplyTopic(ctx, topic, ApplyOptions{AllowReducedReplicas: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Log(ch)
	cfg := natstest.StreamConfig(t, js, "profiles")
	if cfg.MaxMsgsPerSubject != 1 || !cfg.AllowMsgTTL {
		t.Fatalf("stream: max_msgs_per_subject %d allow_msg_ttl %v", cfg.MaxMsgsPerSubject, cfg.AllowMsgTTL)
	}
	// Read back from the stream's record.
	if st, err := rec.DescribeTopic(ctx, "profiles"); err != nil || !st.Spec.Compacted() || st.Spec.TombstoneRetention != time.Second {
		t.Fatalf("describe: %+v %v", st.Spec, err)
	}
	// Apply again: unchanged.
	if ch, err := rec.ApplyTopic(ctx, topic, ApplyOptions{AllowReducedReplicas: true}); err != nil || ch.Action != ActionUnchanged {
		t.Fatalf("re-apply: %v %v", ch, err)
	}

	pub := platform.NewPublisher(js, platform.PublisherOptions{})
	n := 0
	put := func(key, val string) {
		n++
		if _, err := pub.Publish(ctx, platform.Event{ID: fmt.Sprint(n), Topic: "profiles", Key: key, Payload: []byte(val)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		put("cust-1", fmt.Sprintf("v%d", i))
		put("cust-2", fmt.Sprintf("v%d", i))
	}
	for key, want := range map[string]string{"cust-1": "v4", "cust-2": "v4"} {
		got := storedFor(t, js, topic, key)
		if len(got) != 1 || string(got[0].Data) != want {
			t.Fatalf("%s: %d stored events, want 1 (%s)", key, len(got), want)
		}
	}

	// Tombstone cust-2: it replaces the value, then expires.
	n++
	ev, err := platform.TombstoneEvent(topic, fmt.Sprint(n), "cust-2")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Publish(ctx, ev); err != nil {
		t.Fatal(err)
	}
	got := storedFor(t, js, topic, "cust-2")
	if len(got) != 1 || !platform.IsTombstone(got[0].Header) {
		t.Fatalf("cust-2 after tombstone: %d events, tombstone=%v", len(got), len(got) == 1 && platform.IsTombstone(got[0].Header))
	}
	natstest.WaitFor(t, 15*time.Second, func() error {
		if got := storedFor(t, js, topic, "cust-2"); len(got) != 0 {
			return fmt.Errorf("cust-2 still has %d event(s)", len(got))
		}
		return nil
	})
	if got := storedFor(t, js, topic, "cust-1"); len(got) != 1 || string(got[0].Data) != "v4" {
		t.Fatalf("cust-1 lost its value: %d events", len(got))
	}
}

func TestReconcileRefusesCleanupSwitchWithoutFlag(t *testing.T) {
	rec, _, js, ctx := onFabric(t, 1)
	topic := platform.DefaultTopicSpec("prices")
	topic.Replicas = 1
	if _, err := rec.ApplyTopic(ctx, topic, ApplyOptions{AllowReducedReplicas: true}); err != nil {
		t.Fatal(err)
	}
	compact := topic
	compact.Cleanup = platform.CleanupCompact
	_, err := rec.ApplyTopic(ctx, compact, ApplyOptions{AllowReducedReplicas: true})
	if !errors.Is(err, platform.ErrConflict) {
		t.Fatalf("delete -> compact without flag: %v, want ErrConflict", err)
	}
	t.Log(err)
	if cfg := natstest.StreamConfig(t, js, "prices"); cfg.MaxMsgsPerSubject > 0 {
		t.Fatalf("refused change was applied: %+v", cfg.MaxMsgsPerSubject)
	}
	ch, err := rec.ApplyTopic(ctx, compact, ApplyOptions{AllowReducedReplicas: true, AllowCleanupChange: true})
	if err != nil || ch.Action != ActionUpdate {
		t.Fatalf("with flag: %v %v", ch, err)
	}
	if cfg := natstest.StreamConfig(t, js, "prices"); cfg.MaxMsgsPerSubject != 1 || !cfg.AllowMsgTTL {
		t.Fatalf("compact not applied: %d %v", cfg.MaxMsgsPerSubject, cfg.AllowMsgTTL)
	}
	// And back: refused without the flag, applied with it (AllowMsgTTL
	// stays on: the server cannot turn it off).
	if _, err := rec.ApplyTopic(ctx, topic, ApplyOptions{AllowReducedReplicas: true}); !errors.Is(err, platform.ErrConflict) {
		t.Fatalf("compact -> delete without flag: %v", err)
	}
	if _, err := rec.ApplyTopic(ctx, topic, ApplyOptions{AllowReducedReplicas: true, AllowCleanupChange: true}); err != nil {
		t.Fatal(err)
	}
	if cfg := natstest.StreamConfig(t, js, "prices"); cfg.MaxMsgsPerSubject > 0 {
		t.Fatalf("delete not applied: %d", cfg.MaxMsgsPerSubject)
	}
	if ch, err := rec.ApplyTopic(ctx, topic, ApplyOptions{AllowReducedReplicas: true}); err != nil || ch.Action != ActionUnchanged {
		t.Fatalf("re-apply delete: %v %v", ch, err)
	}
}
