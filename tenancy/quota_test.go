package tenancy_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/tenancy"
)

// The publish-rate quota holds over connections on every node, both
// policies, and changes live; malformed input and delete-with-data
// change nothing.
func TestRateQuotaMalformedDelete(t *testing.T) {
	e := start(t, 3)
	q := tenancy.DefaultQuota()
	q.PublishRate, q.Policy = 200, tenancy.PolicyReject
	e.tenant("harbor-retail", q)
	creds := e.user("harbor-retail", "producer", []string{"orders"}, nil)

	// flood publishes from 3 connections (one per node) for d and counts
	// acks and 429s.
	flood := func(d time.Duration) (acked, limited int64) {
		var a, l atomic.Int64
		var wg sync.WaitGroup
		stop := time.Now().Add(d)
		for i := range 3 {
			nc := e.mustConnect(creds, "producer", i)
			js, _ := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(256))
			wg.Add(1)
			go func() {
				defer wg.Done()
				var futs []jetstream.PubAckFuture
				for time.Now().Before(stop) {
					f, err := js.PublishAsync("orders.k", []byte("x"))
					if err != nil {
						continue
					}
					futs = append(futs, f)
				}
				for _, f := range futs {
					select {
					case <-f.Ok():
						a.Add(1)
					case err := <-f.Err():
						var apiErr *jetstream.APIError
						if errors.As(err, &apiErr) && apiErr.Code == 429 {
							l.Add(1)
						}
					case <-time.After(5 * time.Second):
					}
				}
			}()
		}
		wg.Wait()
		return a.Load(), l.Load()
	}
	acked, limited := flood(2 * time.Second)
	rate := float64(acked) / 2
	t.Logf("reject 200/s over 3 nodes: %d acked (%.0f/s), %d refused with 429", acked, rate, limited)
	if rate > 200*1.15 || rate < 200*0.8 || limited == 0 {
		t.Errorf("achieved %.0f/s with quota 200/s (429s: %d)", rate, limited)
	}

	// Live change to throttle at 400/s.
	q.PublishRate, q.Policy = 400, tenancy.PolicyThrottle
	if _, err := e.m.Update(ctx(t), "test", "harbor-retail", q); err != nil {
		t.Fatal(err)
	}
	acked, limited = flood(2 * time.Second)
	// Throttled events still queued when the flood stops (at most two
	// seconds of quota, 800; the 3 publishers hold at most 768 in flight)
	// are acked after it: they count on top. With that window nothing
	// overflows the queue: the publishers are slowed, not refused.
	t.Logf("throttle 400/s: %d acked in 2s + drain (bound 800 + 768 in flight + 40 burst), %d refused (queue full)", acked, limited)
	if acked > 800*1.1+768+40 || acked < 800*0.75 || limited != 0 {
		t.Errorf("%d acked in 2s with quota 400/s (bound %d), %d refused", acked, 800+768+40, limited)
	}
	us, err := e.m.Usage(ctx(t), "harbor-retail")
	if err != nil || len(us) != 1 || us[0].MsgsIn == 0 || us[0].Throttled == 0 || us[0].Rejected == 0 {
		t.Errorf("usage = %+v, %v", us, err)
	}

	// Malformed input: clear errors, nothing changes.
	before, _ := e.m.List(ctx(t))
	bad := tenancy.DefaultQuota()
	bad.PublishRate = -1
	for name, err := range map[string]error{
		"bad name":       errOf(e.m.Create(ctx(t), "test", tenancy.DefaultSpec("Harbor Retail"))),
		"bad quota":      errOf(e.m.Create(ctx(t), "test", tenancy.Spec{Name: "x", Quota: bad})),
		"unknown update": errOf(e.m.Update(ctx(t), "test", "nobody", tenancy.DefaultQuota())),
		"bad update":     errOf(e.m.Update(ctx(t), "test", "harbor-retail", bad)),
		"unknown user":   errOf(e.m.RevokeUser(ctx(t), "test", "harbor-retail", "ghost")),
		"unknown acl":    errOf(e.m.AddUser(ctx(t), "test", "harbor-retail", tenancy.UserSpec{Name: "u", Pub: []string{"payments"}})),
		"reserved topic": errOf(e.m.ApplyTopic(ctx(t), "test", "harbor-retail", platform.DefaultTopicSpec("stored.x"), platform.ApplyOptions{})),
		"duplicate":      errOf(e.m.Create(ctx(t), "test", tenancy.DefaultSpec("harbor-retail"))),
		"with data":      e.m.Delete(ctx(t), "test", "harbor-retail", false),
	} {
		if !errors.Is(err, tenancy.ErrInvalid) && !errors.Is(err, tenancy.ErrNotFound) && !errors.Is(err, tenancy.ErrConflict) {
			t.Errorf("%s: err = %v, want a tenancy sentinel", name, err)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	after, _ := e.m.List(ctx(t))
	if len(after) != len(before) || after[0].Quota != q || len(after[0].Users) != 1 {
		t.Fatalf("malformed input changed the registry: %+v", after)
	}
	if err := e.m.Delete(ctx(t), "test", "harbor-retail", true); err != nil {
		t.Fatalf("delete --purge: %v", err)
	}
	if _, err := e.connect(creds, "producer", 0); err == nil {
		t.Fatalf("a deleted tenant's user connected")
	}
}

func errOf[T any](_ T, err error) error { return err }
