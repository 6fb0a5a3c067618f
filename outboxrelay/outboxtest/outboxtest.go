package outboxtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/msgplatform/platform/outboxrelay"
)

// Enqueue commits evs in one service transaction (or Pebble batch): all of
// them or, on error, none.
type Enqueue func(ctx context.Context, evs ...outboxrelay.Event) error

// Harness opens a fresh, empty outbox for each subtest.
type Harness struct {
	Open func(t *testing.T) (outboxrelay.Store, Enqueue)
}

// Run runs the whole contract against h as subtests of t.
func Run(t *testing.T, h Harness) {
	t.Run("EnqueueValidation", func(t *testing.T) { testEnqueueValidation(t, h) })
	t.Run("UnsentOrderLimitSkip", func(t *testing.T) { testUnsent(t, h) })
	t.Run("MarkSent", func(t *testing.T) { testMarkSent(t, h) })
	t.Run("Fencing", func(t *testing.T) { testFencing(t, h) })
	t.Run("PruneInBatches", func(t *testing.T) { testPrune(t, h) })
}

func ev(id, key string) outboxrelay.Event {
	return outboxrelay.Event{ID: id, Topic: "orders", Key: key, Payload: []byte(id)}
}

func unsent(t *testing.T, s outboxrelay.Store, limit int, skip []uint64) []outboxrelay.Record {
	t.Helper()
	recs, err := s.Unsent(context.Background(), limit, skip)
	if err != nil {
		t.Fatalf("Unsent: %v", err)
	}
	return recs
}

func ids(recs []outboxrelay.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.ID
	}
	return out
}

func seqs(recs []outboxrelay.Record) []uint64 {
	out := make([]uint64, len(recs))
	for i, r := range recs {
		out[i] = r.Seq
	}
	return out
}

// seeded opens an outbox from h, commits evs to it in one transaction and
// returns it with their records in Seq order.
func seeded(t *testing.T, h Harness, evs ...outboxrelay.Event) (outboxrelay.Store, []outboxrelay.Record) {
	t.Helper()
	s, enqueue := h.Open(t)
	if err := enqueue(context.Background(), evs...); err != nil {
		t.Fatal(err)
	}
	return s, unsent(t, s, 1000, nil)
}

// markSent fences s with tok and marks recs sent with it.
func markSent(t *testing.T, s outboxrelay.Store, tok uint64, recs []outboxrelay.Record) {
	t.Helper()
	if err := s.Fence(context.Background(), tok); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkSent(context.Background(), tok, seqs(recs)); err != nil {
		t.Fatal(err)
	}
}

// wantUnsentStat fails t unless s's Stats count n unsent records.
func wantUnsentStat(t *testing.T, s outboxrelay.Store, n int64, when string) {
	t.Helper()
	if st, err := s.Stats(context.Background()); err != nil || st.Unsent != n {
		t.Fatalf("Stats %s: %+v, %v; want %d unsent", when, st, err, n)
	}
}

func testEnqueueValidation(t *testing.T, h Harness) {
	ctx := context.Background()
	s, enqueue := h.Open(t)
	for name, bad := range map[string]outboxrelay.Event{
		"empty id":          {Topic: "orders", Key: "k"},
		"empty topic":       {ID: "x", Key: "k"},
		"key of two tokens": {ID: "y", Topic: "orders", Key: "a.b"},
	} {
		// The bad event shares its transaction with a good one: neither is
		// written.
		err := enqueue(ctx, ev("good-"+name, "k"), bad)
		if !errors.Is(err, outboxrelay.ErrInvalidEvent) {
			t.Errorf("%s: enqueue error %v, want ErrInvalidEvent", name, err)
		}
	}
	if recs := unsent(t, s, 100, nil); len(recs) != 0 {
		t.Fatalf("after refused enqueues: %d records (%v), want none", len(recs), ids(recs))
	}
	st, err := s.Stats(ctx)
	if err != nil || st.Unsent != 0 || !st.OldestUnsent.IsZero() {
		t.Fatalf("Stats after refused enqueues: %+v, %v; want empty", st, err)
	}
}

func testUnsent(t *testing.T, h Harness) {
	ctx := context.Background()
	s, enqueue := h.Open(t)
	var want []string
	for tx := range 4 { // four transactions, keys interleaved
		var evs []outboxrelay.Event
		for i := range 3 {
			for _, k := range []string{"a", "b"} {
				e := ev(fmt.Sprintf("%s-%d-%d", k, tx, i), k)
				evs = append(evs, e)
				want = append(want, e.ID)
			}
		}
		if err := enqueue(ctx, evs...); err != nil {
			t.Fatal(err)
		}
	}
	all := unsent(t, s, 1000, nil)
	if !slices.Equal(ids(all), want) {
		t.Fatalf("Unsent: %v, want commit order %v", ids(all), want)
	}
	if !slices.IsSorted(seqs(all)) {
		t.Fatalf("Unsent seqs not ascending: %v", seqs(all))
	}
	if rec := all[0]; rec.Topic != "orders" || rec.Key != "a" || string(rec.Payload) != rec.ID || rec.CreatedAt.IsZero() {
		t.Fatalf("record fields: %+v", rec)
	}
	if got := unsent(t, s, 5, nil); !slices.Equal(ids(got), want[:5]) {
		t.Fatalf("Unsent limit 5: %v, want %v", ids(got), want[:5])
	}
	// Skip the first 5 and every third record after them.
	skip := seqs(all[:5])
	var rest []string
	for i, r := range all[5:] {
		if i%3 == 0 {
			skip = append(skip, r.Seq)
			continue
		}
		rest = append(rest, r.ID)
	}
	if got := unsent(t, s, 1000, skip); !slices.Equal(ids(got), rest) {
		t.Fatalf("Unsent with skip: %v, want %v", ids(got), rest)
	}
	// The limit counts the records returned, not the skipped ones.
	if got := unsent(t, s, 4, skip); !slices.Equal(ids(got), rest[:4]) {
		t.Fatalf("Unsent limit 4 with skip: %v, want %v", ids(got), rest[:4])
	}
}

func testMarkSent(t *testing.T, h Harness) {
	ctx := context.Background()
	s, all := seeded(t, h, ev("e1", "k"), ev("e2", "k"), ev("e3", "j"))
	markSent(t, s, 7, all[:2])
	if err := s.MarkSent(ctx, 7, seqs(all[:1])); err != nil { // again: no-op
		t.Fatalf("MarkSent of a sent record: %v", err)
	}
	if err := s.MarkSent(ctx, 7, nil); err != nil {
		t.Fatalf("MarkSent of nothing: %v", err)
	}
	if got := unsent(t, s, 10, nil); !slices.Equal(ids(got), []string{"e3"}) {
		t.Fatalf("Unsent after marking e1, e2: %v", ids(got))
	}
	st, err := s.Stats(ctx)
	if err != nil || st.Unsent != 1 || st.OldestUnsent.IsZero() {
		t.Fatalf("Stats: %+v, %v; want 1 unsent with its time", st, err)
	}
}

func testFencing(t *testing.T, h Harness) {
	ctx := context.Background()
	s, all := seeded(t, h, ev("e1", "k"), ev("e2", "k"))
	if err := s.Fence(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if err := s.Fence(ctx, 5); err != nil {
		t.Fatalf("Fence with the current token again: %v", err)
	}
	if err := s.Fence(ctx, 3); !errors.Is(err, outboxrelay.ErrFenced) {
		t.Fatalf("Fence with an older token: %v, want ErrFenced", err)
	}
	if err := s.MarkSent(ctx, 3, seqs(all)); !errors.Is(err, outboxrelay.ErrFenced) {
		t.Fatalf("MarkSent with an older token: %v, want ErrFenced", err)
	}
	if err := s.Fence(ctx, 9); err != nil { // a new relay takes over
		t.Fatal(err)
	}
	if err := s.MarkSent(ctx, 5, seqs(all)); !errors.Is(err, outboxrelay.ErrFenced) {
		t.Fatalf("MarkSent by the deposed relay: %v, want ErrFenced", err)
	}
	if got := unsent(t, s, 10, nil); len(got) != 2 {
		t.Fatalf("refused marks marked something: unsent %v", ids(got))
	}
	wantUnsentStat(t, s, 2, "after refused marks")
	if err := s.MarkSent(ctx, 9, seqs(all)); err != nil {
		t.Fatalf("MarkSent by the current relay: %v", err)
	}
	if got := unsent(t, s, 10, nil); len(got) != 0 {
		t.Fatalf("unsent after the current relay's mark: %v", ids(got))
	}
}

func testPrune(t *testing.T, h Harness) {
	ctx := context.Background()
	var evs []outboxrelay.Event
	for i := range 30 {
		evs = append(evs, ev(fmt.Sprintf("e%02d", i), fmt.Sprintf("k%d", i%4)))
	}
	s, all := seeded(t, h, evs...)
	markSent(t, s, 1, all[:25])
	if n, err := s.Prune(ctx, time.Now().Add(-time.Hour), 10); err != nil || n != 0 {
		t.Fatalf("Prune before an hour ago: %d, %v; want 0 (nothing sent that early)", n, err)
	}
	time.Sleep(10 * time.Millisecond)
	cutoff := time.Now().Add(time.Second)
	var got []int
	for range 5 {
		n, err := s.Prune(ctx, cutoff, 10)
		if err != nil {
			t.Fatal(err)
		}
		if n > 10 {
			t.Fatalf("Prune with limit 10 deleted %d", n)
		}
		got = append(got, n)
		if n == 0 {
			break
		}
	}
	if !slices.Equal(got, []int{10, 10, 5, 0}) {
		t.Fatalf("Prune batches: %v, want [10 10 5 0]", got)
	}
	if rest := unsent(t, s, 100, nil); !slices.Equal(ids(rest), ids(all[25:])) {
		t.Fatalf("Prune touched unsent records: %v, want %v", ids(rest), ids(all[25:]))
	}
	wantUnsentStat(t, s, 5, "after pruning")
}
