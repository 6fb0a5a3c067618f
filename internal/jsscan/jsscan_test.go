package jsscan

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
)

// testStream is a stream "held" on a one-node fabric.
func testStream(t *testing.T) (jetstream.JetStream, jetstream.Stream) {
	t.Helper()
	f := natstest.RunFabric(t, 1, natstest.WithSyncAlways(false))
	js := f.JetStream()
	s, err := js.CreateStream(natstest.Context(t, 30*time.Second), jetstream.StreamConfig{Name: "held", Subjects: []string{"held.>"}, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	return js, s
}

func publish(t *testing.T, js jetstream.JetStream, n int) {
	t.Helper()
	for i := range n {
		if _, err := js.Publish(natstest.Context(t, 30*time.Second), fmt.Sprintf("held.%d", i+1), fmt.Appendf(nil, "payload %d", i+1)); err != nil {
			t.Fatal(err)
		}
	}
}

// leaderHolds is what Range asks when the replica it reads says nothing
// more is pending: does the leader hold any message in a range (deleted
// messages and a purged prefix do not count)?
func TestLeaderHolds(t *testing.T) {
	js, s := testStream(t)
	ctx := natstest.Context(t, 30*time.Second)
	holds := func(from, to uint64) bool {
		t.Helper()
		ok, err := leaderHolds(ctx, s, from, to)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if holds(1, 10) {
		t.Fatal("empty stream: holds 1..10")
	}
	publish(t, js, 10)
	for _, q := range []uint64{4, 5, 6} {
		if err := s.DeleteMsg(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSequence(3)); err != nil { // 1 and 2 go
		t.Fatal(err)
	}
	for _, c := range []struct {
		from, to uint64
		want     bool
	}{
		{1, 2, false},   // purged
		{4, 6, false},   // deleted
		{1, 6, true},    // 3 is there
		{5, 7, true},    // 7 is there
		{11, 20, false}, // beyond the last
		{10, 20, true},
	} {
		if got := holds(c.from, c.to); got != c.want {
			t.Errorf("holds %d..%d: %v, want %v", c.from, c.to, got, c.want)
		}
	}
}

// Range reads exactly from..To in order, with interior deletes, headers
// only when asked, stops when fn says so, and never waits out a fetch's
// expiry (2 s) for messages that are not there.
func TestRange(t *testing.T) {
	js, s := testStream(t)
	ctx := natstest.Context(t, 30*time.Second)
	publish(t, js, 1200)
	for _, q := range []uint64{7, 8, 600} {
		if err := s.DeleteMsg(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	read := func(from uint64, o Options, stopAt uint64) (seqs []uint64, payloads int, took time.Duration) {
		t.Helper()
		start := time.Now()
		err := Range(ctx, js, "held", from, o, func(m *jetstream.RawStreamMsg) bool {
			seqs = append(seqs, m.Sequence)
			if len(m.Data) > 0 {
				payloads++
			}
			return m.Sequence != stopAt
		})
		if err != nil {
			t.Fatal(err)
		}
		return seqs, payloads, time.Since(start)
	}
	check := func(name string, seqs []uint64, from, to uint64, gone ...uint64) {
		t.Helper()
		want := []uint64{}
		for q := from; q <= to; q++ {
			if q != gone[0] && q != gone[1] && q != gone[2] {
				want = append(want, q)
			}
		}
		if fmt.Sprint(seqs) != fmt.Sprint(want) {
			t.Errorf("%s: read %d messages (%v..), want %d (%d..%d)", name, len(seqs), head(seqs), len(want), from, to)
		}
	}
	seqs, payloads, took := read(1, Options{}, 0)
	check("whole stream", seqs, 1, 1200, 7, 8, 600)
	if payloads != len(seqs) || took > 1500*time.Millisecond {
		t.Errorf("whole stream: %d payloads of %d, took %v", payloads, len(seqs), took)
	}
	seqs, payloads, took = read(5, Options{To: 650, HeadersOnly: true}, 0)
	check("5..650 headers only", seqs, 5, 650, 7, 8, 600)
	if payloads != 0 || took > 1500*time.Millisecond {
		t.Errorf("headers only: %d payloads, took %v", payloads, took)
	}
	seqs, _, _ = read(1, Options{}, 10)
	check("stopped at 10", seqs, 1, 10, 7, 8, 600)
	if seqs, _, _ = read(1300, Options{}, 0); len(seqs) != 0 {
		t.Errorf("past the end: read %v", seqs)
	}
}

func head(s []uint64) []uint64 { return s[:min(len(s), 5)] }

// One batched direct get: the first match and how many follow it, the
// last message of a subject at or below a sequence, and nothing (404)
// as no messages and no error.
func TestDirectBatch(t *testing.T) {
	js, s := testStream(t)
	ctx := natstest.Context(t, 30*time.Second)
	cfg := s.CachedInfo().Config
	cfg.AllowDirect = true
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		if _, err := js.Publish(ctx, fmt.Sprintf("held.%d", i%3), nil); err != nil {
			t.Fatal(err)
		}
	}
	type next struct {
		Seq      uint64 `json:"seq"`
		NextFor  string `json:"next_by_subj"`
		Batch    int    `json:"batch"`
		MaxBytes int    `json:"max_bytes"`
	}
	msgs, pending, err := DirectBatch(ctx, js, "held", next{Seq: 1, NextFor: "held.1", Batch: 1, MaxBytes: 1})
	if err != nil || len(msgs) != 1 || pending != 9 {
		t.Fatalf("held.1: %d messages, %d pending, %v; want 1 and 9", len(msgs), pending, err)
	}
	if seq, err := Sequence(msgs[0]); err != nil || seq != 2 {
		t.Fatalf("first held.1 at %d, %v; want 2", seq, err)
	}
	msgs, _, err = DirectBatch(ctx, js, "held", struct {
		MultiLast []string `json:"multi_last"`
		UpToSeq   uint64   `json:"up_to_seq"`
		Batch     int      `json:"batch"`
	}{MultiLast: []string{"held.2"}, UpToSeq: 20, Batch: 1})
	if err != nil || len(msgs) != 1 {
		t.Fatalf("last held.2 up to 20: %d messages, %v", len(msgs), err)
	}
	if seq, _ := Sequence(msgs[0]); seq != 18 {
		t.Fatalf("last held.2 up to 20 at %d, want 18", seq)
	}
	if msgs, pending, err = DirectBatch(ctx, js, "held", next{Seq: 1, NextFor: "held.9", Batch: 1}); err != nil || len(msgs) != 0 || pending != 0 {
		t.Fatalf("no match: %d messages, %d pending, %v", len(msgs), pending, err)
	}
}
