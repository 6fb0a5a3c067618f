package tenancy_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/tenancy"
)

// The ingest keeps a publisher's events on one subject in order and
// stamps every one, unthrottled, throttled, and across a quota lifted
// while events wait in the throttle queue; a new topic's stream leader
// is placed on the ingest's server.
func TestIngestOrderStampAndPlacement(t *testing.T) {
	e := start(t, 3)
	creds := e.rateLimited("ordered", 2000, tenancy.PolicyThrottle)

	js, err := e.m.TenantJetStream("ordered")
	if err != nil {
		t.Fatal(err)
	}
	ingestServer := js.Conn().ConnectedServerName()
	// The ingest waits up to a second for the move it asked for (best
	// effort); on a loaded machine the leader may move after that.
	natstest.WaitFor(t, 10*time.Second, func() error {
		st, err := js.Stream(ctx(t), tenancy.StreamName("orders"))
		if err != nil {
			return err
		}
		if l := st.CachedInfo().Cluster.Leader; l != ingestServer {
			return fmt.Errorf("stream leader of a new topic on %s, want the ingest's server %s", l, ingestServer)
		}
		return nil
	})

	// One publisher per node; each sends seq 0..n-1 on its own subject
	// (half of them with a spoofed tenant header), async with a window.
	publish := func(from, n int, lift func()) {
		t.Helper()
		type pub struct {
			js   jetstream.JetStream
			futs []jetstream.PubAckFuture
		}
		var pubs []*pub
		for i := range 3 {
			pjs := e.jetStream(creds, "producer", i, jetstream.WithPublishAsyncMaxPending(256))
			pubs = append(pubs, &pub{js: pjs})
		}
		for s := from; s < from+n; s++ {
			if s == from+n/2 && lift != nil {
				lift()
			}
			for i, p := range pubs {
				m := &nats.Msg{Subject: "orders.p" + strconv.Itoa(i), Data: []byte(strconv.Itoa(s)), Header: nats.Header{}}
				if s%2 == 0 {
					m.Header.Set("platform-tenant", "someone-else")
				}
				f, err := p.js.PublishMsgAsync(m, jetstream.WithStallWait(10*time.Second))
				if err != nil {
					t.Fatalf("publish %d from node %d: %v", s, i, err)
				}
				p.futs = append(p.futs, f)
			}
		}
		for i, p := range pubs {
			for k, f := range p.futs {
				select {
				case <-f.Ok():
				case err := <-f.Err():
					t.Fatalf("node %d event %d: %v", i, k, err)
				case <-time.After(20 * time.Second):
					t.Fatalf("node %d event %d: no ack", i, k)
				}
			}
		}
	}
	// check reads the stream and wants, per publisher, 0..n-1 exactly
	// once each and in order, every event stamped with the tenant only.
	check := func(n int) {
		t.Helper()
		nc, err := e.m.ConnectTenant(ctx(t), "ordered", "reader")
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		rjs, _ := jetstream.New(nc)
		rst, err := rjs.Stream(ctx(t), tenancy.StreamName("orders"))
		if err != nil {
			t.Fatal(err)
		}
		if got := rst.CachedInfo().State.Msgs; got != uint64(3*n) {
			t.Fatalf("%d events stored, want %d", got, 3*n)
		}
		next := map[string]int{}
		bad := 0
		for seq := uint64(1); seq <= uint64(3*n); seq++ {
			m, err := rst.GetMsg(ctx(t), seq)
			if err != nil {
				t.Fatalf("event %d: %v", seq, err)
			}
			subj := m.Subject
			data, hdr := m.Data, m.Header
			k, _ := strconv.Atoi(string(data))
			if k != next[subj] {
				bad++
				if bad < 5 {
					t.Errorf("%s: event %d where %d was due (lost, duplicate or out of order)", subj, k, next[subj])
				}
			}
			next[subj] = k + 1
			if v := hdr.Values(tenancy.HeaderTenant); len(v) != 1 || v[0] != "ordered" {
				t.Fatalf("%s event %d: tenant header %q", subj, k, v)
			}
		}
		for subj, k := range next {
			if k != n {
				t.Errorf("%s: last event %d, want %d", subj, k-1, n-1)
			}
		}
		if bad > 0 {
			t.Fatalf("%d events out of order, lost or duplicated", bad)
		}
	}

	// Throttled at 2000/s (up to 768 events queued), the quota lifted half way
	// while the queue holds events: order kept across the change.
	const n = 2000
	t0 := time.Now()
	publish(0, n, func() {
		if _, err := e.m.Update(ctx(t), "test", "ordered", rateQuota(0, tenancy.PolicyThrottle)); err != nil {
			t.Fatalf("lift quota: %v", err)
		}
	})
	t.Logf("%d events, throttled then unthrottled, in %s", 3*n, time.Since(t0))
	check(n)
}
