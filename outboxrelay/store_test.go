package outboxrelay_test

import (
	"context"
	"testing"
	"time"

	"github.com/msgplatform/platform/outboxrelay"
)

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
	fx := newFixture(t)
	fx.eachBackend(t, "prune-", func(t *testing.T, b *backend, topic string) {
		pc := &pruneCounter{Store: b.store, calls: make(chan int, 100)}
		cfg := testConfig(topic)
		cfg.Retention = 0
		cfg.PruneInterval = 300 * time.Millisecond
		cfg.PruneBatch = 7
		if err := b.enqueue(context.Background(), events(topic, topic, 30, 1)...); err != nil {
			t.Fatal(err)
		}
		fx.startRelay(t, cfg, pc)
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
