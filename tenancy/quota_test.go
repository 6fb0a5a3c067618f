package tenancy_test

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/tenancy"
)

// The publish-rate quota holds over connections on every node, both
// policies, and changes live; malformed input and delete-with-data
// change nothing.
func TestRateQuotaMalformedDelete(t *testing.T) {
	e := start(t, 3)
	creds := e.rateLimited("harbor-retail", 200, tenancy.PolicyReject)

	acked, limited := e.flood(creds, "producer", 2*time.Second)
	rate := float64(acked) / 2
	t.Logf("reject 200/s over 3 nodes: %d acked (%.0f/s), %d refused with 429", acked, rate, limited)
	if rate > 200*1.15 || rate < 200*0.8 || limited == 0 {
		t.Errorf("achieved %.0f/s with quota 200/s (429s: %d)", rate, limited)
	}

	// Live change to throttle at 400/s.
	q := rateQuota(400, tenancy.PolicyThrottle)
	if _, err := e.m.Update(ctx(t), "test", "harbor-retail", q); err != nil {
		t.Fatal(err)
	}
	acked, limited = e.flood(creds, "producer", 2*time.Second)
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
		"reserved topic": errOf(e.m.ApplyTopic(ctx(t), "test", "harbor-retail", platform.DefaultTopicSpec("stored.x"), catalog.ApplyOptions{})),
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
	// An update to the same quota changes nothing: no push, no audit.
	audited := func() int {
		recs, err := e.m.Audit(ctx(t), tenancy.AuditFilter{Tenant: "harbor-retail"})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range recs {
			if r.Action == "tenant.update" {
				n++
			}
		}
		return n
	}
	n := audited()
	if same, err := e.m.Update(ctx(t), "test", "harbor-retail", q); err != nil || same.Quota != q || !same.Updated.Equal(after[0].Updated) {
		t.Errorf("update to the same quota: %v, quota %+v, updated %s (was %s)", err, same.Quota, same.Updated, after[0].Updated)
	}
	if got := audited(); got != n {
		t.Errorf("update to the same quota was audited: %d tenant.update records, was %d", got, n)
	}
	if err := e.m.Delete(ctx(t), "test", "harbor-retail", true); err != nil {
		t.Fatalf("delete --purge: %v", err)
	}
	if _, err := e.connect(creds, "producer", 0); err == nil {
		t.Fatalf("a deleted tenant's user connected")
	}
}

func errOf[T any](_ T, err error) error { return err }

// A throttled tenant whose publishers keep more in flight than the
// throttle queue holds: every acknowledged publish gets exactly one
// answer. Those that fit in the queue are stored (acked later, at the
// quota); those beyond it get the 429 at once, not after waiting; none
// is lost, duplicated or left unanswered, and the counters agree.
func TestThrottleOverflowAnswersEveryPublish(t *testing.T) {
	e := start(t, 3)
	creds := e.rateLimited("overflow", 200, tenancy.PolicyThrottle) // queue: max(256, 2 s of quota) = 400 events

	const conns, perConn, window = 2, 600, 512 // 1024 in flight > 400 queued
	type outcome struct {
		acked, refused, other, unanswered int
		seqs                              []uint64
		refusedIn                         []time.Duration // publish to 429
	}
	outs := make([]outcome, conns)
	var wg sync.WaitGroup
	for i := range conns {
		nc := e.mustConnect(creds, "producer", i)
		js := natstest.JetStream(t, nc, jetstream.WithPublishAsyncMaxPending(window))
		wg.Add(1)
		go func() {
			defer wg.Done()
			type sent struct {
				f  jetstream.PubAckFuture
				at time.Time
			}
			var futs []sent
			for n := range perConn {
				f, err := js.PublishAsync("orders.k", []byte(fmt.Sprintf("%d-%d", i, n)), jetstream.WithStallWait(30*time.Second))
				if err != nil {
					t.Errorf("publish %d-%d: %v", i, n, err)
					return
				}
				futs = append(futs, sent{f, time.Now()})
			}
			// Each answer is timed as it comes (not in publish order: the
			// queued events' acks come at the quota, after the refusals).
			o := &outs[i]
			var mu sync.Mutex
			var answers sync.WaitGroup
			giveUp := time.Now().Add(30 * time.Second)
			for _, s := range futs {
				answers.Add(1)
				go func() {
					defer answers.Done()
					select {
					case ack := <-s.f.Ok():
						mu.Lock()
						o.acked++
						o.seqs = append(o.seqs, ack.Sequence)
						mu.Unlock()
					case err := <-s.f.Err():
						took := time.Since(s.at)
						mu.Lock()
						defer mu.Unlock()
						var apiErr *jetstream.APIError
						if errors.As(err, &apiErr) && apiErr.Code == 429 && apiErr.ErrorCode == tenancy.ErrCodeRateLimited {
							o.refused++
							o.refusedIn = append(o.refusedIn, took)
						} else {
							o.other++
							t.Logf("publish error other than 429: %v", err)
						}
					case <-time.After(time.Until(giveUp)):
						mu.Lock()
						o.unanswered++
						mu.Unlock()
					}
				}()
			}
			answers.Wait()
		}()
	}
	wg.Wait()
	var acked, refused, other, unanswered int
	seqs := map[uint64]bool{}
	var refusedIn []time.Duration
	for _, o := range outs {
		acked, refused, other, unanswered = acked+o.acked, refused+o.refused, other+o.other, unanswered+o.unanswered
		for _, s := range o.seqs {
			seqs[s] = true
		}
		refusedIn = append(refusedIn, o.refusedIn...)
	}
	slices.Sort(refusedIn)
	t.Logf("%d published: %d acked, %d refused (429), %d other errors, %d unanswered; 429 after p50 %v max %v",
		conns*perConn, acked, refused, other, unanswered, pct(refusedIn, 0.5), pct(refusedIn, 1))
	if acked+refused != conns*perConn || other != 0 || unanswered != 0 {
		t.Errorf("outcomes do not add up to the %d published: %d acked + %d refused, %d other, %d unanswered",
			conns*perConn, acked, refused, other, unanswered)
	}
	if refused == 0 || acked < 400 {
		t.Errorf("%d acked, %d refused: want the queue (400) stored and the overflow refused", acked, refused)
	}
	// A refusal is immediate: it does not wait for the queue to drain
	// (the last queued event is acked about 2 s after it was queued).
	if p50 := pct(refusedIn, 0.5); p50 > 500*time.Millisecond {
		t.Errorf("429 p50 %v after the publish, want it at once", p50)
	}
	if len(seqs) != acked {
		t.Errorf("%d acks carry %d distinct stream sequences", acked, len(seqs))
	}
	js, err := e.m.TenantJetStream("overflow")
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx(t), tenancy.StreamName("orders"))
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Msgs; n != uint64(acked) {
		t.Errorf("stream holds %d events, %d were acked", n, acked)
	}
	us, err := e.m.Usage(ctx(t), "overflow")
	if err != nil || len(us) != 1 {
		t.Fatalf("usage: %v, %v", us, err)
	}
	if us[0].MsgsIn != uint64(acked) || us[0].Rejected != uint64(refused) || us[0].Dropped != 0 {
		t.Errorf("usage accepted %d, rejected %d, dropped %d; want %d, %d, 0", us[0].MsgsIn, us[0].Rejected, us[0].Dropped, acked, refused)
	}
}

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[min(len(d)-1, int(p*float64(len(d))))]
}
