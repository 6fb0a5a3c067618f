package outboxrelay_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/outboxrelay"
)

func seqsOf(recs []outboxrelay.Record) []uint64 {
	out := make([]uint64, len(recs))
	for i, r := range recs {
		out[i] = r.Seq
	}
	return out
}

// TestStoreFencing: a store refuses a Fence with a token older than the
// recorded one and a MarkSent with any token but the current one, and the
// refused mark marks nothing (both backends).
func TestStoreFencing(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			if err := b.enqueue(ctx, events("fence", "orders", 3, 1)...); err != nil {
				t.Fatal(err)
			}
			recs, err := b.store.Unsent(ctx, 10, nil)
			if err != nil || len(recs) != 3 {
				t.Fatalf("unsent: %d records, %v", len(recs), err)
			}
			if err := b.store.Fence(ctx, 5); err != nil {
				t.Fatalf("fence 5: %v", err)
			}
			if err := b.store.Fence(ctx, 4); !errors.Is(err, outboxrelay.ErrFenced) {
				t.Errorf("fence 4 after 5: want ErrFenced, got %v", err)
			}
			if err := b.store.Fence(ctx, 5); err != nil {
				t.Errorf("fence 5 again (the same relay re-fencing): %v", err)
			}
			if err := b.store.MarkSent(ctx, 4, seqsOf(recs)); !errors.Is(err, outboxrelay.ErrFenced) {
				t.Errorf("mark with stale token 4: want ErrFenced, got %v", err)
			}
			// A newer relay fences; the old one's mark is refused.
			if err := b.store.Fence(ctx, 9); err != nil {
				t.Fatal(err)
			}
			if err := b.store.MarkSent(ctx, 5, seqsOf(recs)); !errors.Is(err, outboxrelay.ErrFenced) {
				t.Errorf("mark with deposed token 5: want ErrFenced, got %v", err)
			}
			if st, err := b.store.Stats(ctx); err != nil || st.Unsent != 3 {
				t.Fatalf("after refused marks: %+v, %v; want 3 unsent", st, err)
			}
			if err := b.store.MarkSent(ctx, 9, seqsOf(recs[:2])); err != nil {
				t.Fatalf("mark with the current token: %v", err)
			}
			if st, err := b.store.Stats(ctx); err != nil || st.Unsent != 1 {
				t.Fatalf("after the mark: %+v, %v; want 1 unsent", st, err)
			}
		})
	}
}

// TestStoreUnsentSkip: Unsent leaves out the skipped records and still
// returns up to limit of the others, in seq order.
func TestStoreUnsentSkip(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			if err := b.enqueue(ctx, events("skip", "orders", 10, 1)...); err != nil {
				t.Fatal(err)
			}
			all, err := b.store.Unsent(ctx, 100, nil)
			if err != nil || len(all) != 10 {
				t.Fatalf("unsent: %d, %v", len(all), err)
			}
			s := seqsOf(all)
			skip := []uint64{s[0], s[1], s[2], s[5], s[9]}
			got, err := b.store.Unsent(ctx, 4, skip)
			if err != nil {
				t.Fatal(err)
			}
			want := []uint64{s[3], s[4], s[6], s[7]}
			if fmt.Sprint(seqsOf(got)) != fmt.Sprint(want) {
				t.Errorf("unsent(limit 4, skip %v) = %v, want %v", skip, seqsOf(got), want)
			}
		})
	}
}

// TestStorePruneInSmallBatches: Prune deletes at most limit sent records a
// call, only those sent before the cut-off, never an unsent one.
func TestStorePruneInSmallBatches(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			if err := b.enqueue(ctx, events("prune", "orders", 25, 1)...); err != nil {
				t.Fatal(err)
			}
			recs, err := b.store.Unsent(ctx, 100, nil)
			if err != nil || len(recs) != 25 {
				t.Fatalf("unsent: %d, %v", len(recs), err)
			}
			if err := b.store.Fence(ctx, 1); err != nil {
				t.Fatal(err)
			}
			if err := b.store.MarkSent(ctx, 1, seqsOf(recs)); err != nil {
				t.Fatal(err)
			}
			if err := b.enqueue(ctx, events("prune-unsent", "orders", 3, 1)...); err != nil {
				t.Fatal(err)
			}
			if n, err := b.store.Prune(ctx, time.Now().Add(-time.Hour), 10); err != nil || n != 0 {
				t.Errorf("prune before an hour ago: %d, %v; want 0 (all were sent just now)", n, err)
			}
			var got []int
			for {
				n, err := b.store.Prune(ctx, time.Now().Add(time.Second), 10)
				if err != nil {
					t.Fatal(err)
				}
				if n == 0 {
					break
				}
				got = append(got, n)
			}
			if fmt.Sprint(got) != "[10 10 5]" {
				t.Errorf("prune batches %v, want [10 10 5]", got)
			}
			if st, err := b.store.Stats(ctx); err != nil || st.Unsent != 3 {
				t.Errorf("after pruning: %+v, %v; want the 3 unsent kept", st, err)
			}
		})
	}
}

// pruneCounter records the Prune calls a relay makes.
type pruneCounter struct {
	outboxrelay.Store
	calls chan int
}

func (p *pruneCounter) Prune(ctx context.Context, before time.Time, limit int) (int, error) {
	n, err := p.Store.Prune(ctx, before, limit)
	if n > 0 {
		select {
		case p.calls <- n:
		default:
		}
	}
	return n, err
}

// TestRelayPrunes: the leader prunes rows sent longer ago than the
// retention, in batches of PruneBatch.
func TestRelayPrunes(t *testing.T) {
	f := natstest.RunFabric(t, 3)
	js := f.JetStream()
	eachBackend(t, js, "prune-", func(t *testing.T, b *backend, topic string) {
		pc := &pruneCounter{Store: b.store, calls: make(chan int, 100)}
		cfg := testConfig(topic)
		cfg.Retention = 0
		cfg.PruneInterval = 300 * time.Millisecond
		cfg.PruneBatch = 7
		if err := b.enqueue(context.Background(), events(topic, topic, 30, 1)...); err != nil {
			t.Fatal(err)
		}
		startRelay(t, f, cfg, pc)
		waitDrained(t, b.store, 20*time.Second)
		total := 0
		deadline := time.After(20 * time.Second)
		for total < 30 {
			select {
			case n := <-pc.calls:
				if n > cfg.PruneBatch {
					t.Fatalf("one prune deleted %d rows, batch is %d", n, cfg.PruneBatch)
				}
				total += n
			case <-deadline:
				t.Fatalf("pruned %d of 30 sent rows", total)
			}
		}
		if n, err := b.store.Prune(context.Background(), time.Now().Add(time.Hour), 1000); err != nil || n != 0 {
			t.Errorf("left after the relay pruned: %d, %v", n, err)
		}
	})
}
