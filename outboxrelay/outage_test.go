package outboxrelay_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/msgplatform/platform/outboxrelay"
)

// outage is how long every node is down in TestBrokerDown (the issue's
// 30 s).
const outage = 30 * time.Second

// TestBrokerDown stops every node of the fabric for 30 s while the service
// keeps committing to both outboxes (Postgres and Pebble, at once). The
// service's commits never wait for the broker; the relays back off and
// resume on their own, and every event arrives once, in per-key order.
func TestBrokerDown(t *testing.T) {
	fx := newFixture(t)
	bs := backends(t)
	type run struct {
		b       *backend
		topic   string
		relay   *outboxrelay.Relay
		mu      sync.Mutex
		evs     []outboxrelay.Event
		slowest atomic.Int64
	}
	runs := make([]*run, len(bs))
	for i, b := range bs {
		r := &run{b: b, topic: "outage-" + b.name}
		fx.createTopic(t, r.topic)
		r.relay, _ = fx.startRelay(t, testConfig("outage-"+b.name), b.store)
		runs[i] = r
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Add(1)
		go func() { // the service: one event per transaction, 10 keys
			defer wg.Done()
			ctx := context.Background()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				for k := range 10 {
					ev := outboxrelay.Event{
						ID: fmt.Sprintf("%s-k%d-%d", r.topic, k, n), Topic: r.topic, Key: fmt.Sprintf("k%d", k),
						Payload: []byte(fmt.Sprintf("k%d:%d", k, n)),
					}
					start := time.Now()
					if err := r.b.enqueue(ctx, ev); err != nil {
						t.Errorf("%s: commit during the outage: %v", r.b.name, err)
						return
					}
					if d := time.Since(start); d > time.Duration(r.slowest.Load()) {
						r.slowest.Store(int64(d))
					}
					r.mu.Lock()
					r.evs = append(r.evs, ev)
					r.mu.Unlock()
				}
			}
		}()
	}
	time.Sleep(2 * time.Second)
	for i := range fx.Nodes() {
		fx.Kill(i)
	}
	t.Logf("all nodes down for %s", outage)
	time.Sleep(outage)
	for i := range fx.Nodes() {
		if err := fx.Node(i).Launch(); err != nil {
			t.Fatalf("relaunch node %d: %v", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := fx.WaitReady(ctx); err != nil {
		t.Fatalf("fabric not ready after the outage: %v", err)
	}
	back := time.Now()
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()
	for _, r := range runs {
		waitDrained(t, r.b.store, 60*time.Second)
		t.Logf("%s: %d events committed, slowest commit %s, drained %s after the broker came back, relay counts %+v",
			r.b.name, len(r.evs), time.Duration(r.slowest.Load()).Round(time.Millisecond), time.Since(back).Round(time.Millisecond), r.relay.Counts())
		if d := time.Duration(r.slowest.Load()); d > time.Second {
			t.Errorf("%s: a commit took %s: the outage blocked the service", r.b.name, d)
		}
		checkDelivered(t, fx.readStream(t, r.topic), r.evs, false)
	}
}
