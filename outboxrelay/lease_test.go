package outboxrelay_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/outboxrelay"
)

// TestTwoRelays starts two relays against one outbox: only the lease
// holder publishes; when it dies (after publishing, before marking) the
// other takes over within a few seconds and nothing is lost or stored
// twice.
func TestTwoRelays(t *testing.T) {
	fx := newFixture(t)
	fx.eachBackend(t, "two-", func(t *testing.T, b *backend, topic string) {
		crashes := []*crashOnce{{}, {}}
		relays := make([]*outboxrelay.Relay, 2)
		for i := range relays {
			cfg := testConfig(topic)
			cfg.Faults.AfterPublish = crashes[i].hook
			relays[i], _ = fx.startRelay(t, cfg, b.store)
		}
		for _, r := range relays {
			select {
			case <-r.Ready():
			case <-time.After(20 * time.Second):
				t.Fatal("relay never reached the lease bucket")
			}
		}
		var both atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // never two leaders at once
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
				if relays[0].Leader() && relays[1].Leader() {
					both.Add(1)
				}
			}
		}()
		evs := events(topic, topic, 10, 20)
		b.enqueueTx(t, evs[:100], 10)
		waitDrained(t, b.store, 20*time.Second)
		leader := 0
		if relays[1].Leader() {
			leader = 1
		}
		other := 1 - leader
		if c := relays[other].Counts(); c != (outboxrelay.Counts{}) {
			t.Errorf("standby published: %+v", c)
		}
		// Kill the leader between publish and mark.
		crashes[leader].armed.Store(true)
		b.enqueueTx(t, evs[100:], 10)
		natstest.WaitFor(t, 10*time.Second, func() error {
			if !crashes[leader].fired.Load() {
				return fmt.Errorf("leader not killed yet")
			}
			return nil
		})
		killed := time.Now()
		natstest.WaitFor(t, 10*time.Second, func() error {
			if !relays[other].Leader() {
				return fmt.Errorf("standby has not taken over")
			}
			return nil
		})
		takeover := time.Since(killed)
		fx.deliveredOnce(t, b.store, topic, evs)
		close(stop)
		wg.Wait()
		t.Logf("standby took over %s after the leader died", takeover.Round(time.Millisecond))
		if takeover > 3*time.Second {
			t.Errorf("takeover took %s, want within a few seconds (lease TTL 1s)", takeover)
		}
		if n := both.Load(); n > 0 {
			t.Errorf("both relays held the lease in %d samples", n)
		}
	})
}

// TestPerKeyOrderAcrossRestarts: 5 writers commit 60 keys' events
// concurrently while relays are killed between publish and mark over and
// over; every key's events are stored in commit order, once.
func TestPerKeyOrderAcrossRestarts(t *testing.T) {
	fx := newFixture(t)
	fx.eachBackend(t, "order-", func(t *testing.T, b *backend, topic string) {
		const keys, perKey, writers = 60, 15, 5
		evs := events(topic, topic, keys, perKey)
		ctx := context.Background()
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() { // writer w owns keys k with k % writers == w, in order
				defer wg.Done()
				for _, ev := range evs {
					var k int
					fmt.Sscanf(ev.Key, "k%d", &k)
					if k%writers != w {
						continue
					}
					if err := b.enqueue(ctx, ev); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		restarts := 0
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		for writing := true; writing || restarts < 6; restarts++ {
			crash := &crashOnce{}
			cfg := testConfig(topic)
			cfg.BatchSize = 40
			cfg.LeaseTTL = time.Second
			rounds := rand.IntN(3)
			var calls atomic.Int64
			cfg.Faults.AfterPublish = func(acked []outboxrelay.Record) error {
				if calls.Add(1) > int64(rounds) {
					crash.armed.Store(true)
				}
				return crash.hook(acked)
			}
			r, errc := fx.startRelay(t, cfg, b.store)
			waitKilled(t, errc, 15*time.Second, r)
			select {
			case <-done:
				writing = false
			default:
			}
		}
		fx.startRelay(t, testConfig(topic), b.store)
		fx.deliveredOnce(t, b.store, topic, evs)
		t.Logf("%d relays killed between publish and mark", restarts)
	})
}
