package tenancy_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/tenancy"
)

// The node the ingest is connected to crashes while a tenant publishes
// through another node: the ingest's forwarding connection reconnects to
// a surviving node and subscribes again, and a publisher that retries
// each event (same Nats-Msg-Id) until it is acknowledged gets every one
// stored exactly once: 0 lost, 0 duplicates. Throttled, the events
// waiting in the ingest's queue when the connection drops wait for the
// reconnect and are forwarded then: none is refused.
func TestIngestSurvivesItsNodeKilled(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rate   int // 0: unlimited
		window int // async publishes in flight (0: one at a time)
	}{
		{name: "unlimited"},
		{name: "throttled", rate: 150, window: 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := start(t, 3)
			e.tenant("crash", rateQuota(tc.rate, tenancy.PolicyThrottle))
			creds := e.user("crash", "app", []string{"orders"}, nil)
			nodeOf := func(server string) int {
				for i, n := range e.f.Nodes() {
					if s := n.Server(); s != nil && s.Name() == server {
						return i
					}
				}
				return -1
			}
			ingestNode := nodeOf(e.m.IngestServer("crash"))
			if ingestNode < 0 {
				t.Fatalf("the ingest's server %q is not a node of the fabric", e.m.IngestServer("crash"))
			}
			nc := e.mustConnect(creds, "app", (ingestNode+1)%3) // survives the kill
			js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(max(tc.window, 1)),
				jetstream.WithPublishAsyncTimeout(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			const n = 300
			subject := func(i int) string { return fmt.Sprintf("orders.k%d", i%7) }
			id := func(i int) string { return fmt.Sprintf("crash-%d", i) }
			publish := func(i int) error { // one attempt, acknowledged or not
				pctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				_, err := js.Publish(pctx, subject(i), []byte(id(i)), jetstream.WithMsgID(id(i)))
				return err
			}
			retried := 0
			untilAcked := func(i int) {
				deadline := time.Now().Add(30 * time.Second)
				for publish(i) != nil {
					if time.Now().After(deadline) {
						t.Fatalf("event %d not acknowledged within 30s (node %d killed)", i, ingestNode)
					}
					retried++
					time.Sleep(50 * time.Millisecond)
				}
			}
			if tc.window == 0 {
				for i := range n {
					if i == n/3 {
						e.f.Kill(ingestNode)
					}
					untilAcked(i)
				}
			} else {
				// All in flight at once, the node killed while most wait
				// in the throttle queue; whatever fails is sent again.
				futs := make([]jetstream.PubAckFuture, n)
				for i := range n {
					if futs[i], err = js.PublishAsync(subject(i), []byte(id(i)), jetstream.WithMsgID(id(i))); err != nil {
						t.Fatal(err)
					}
					if i == n/3 {
						e.f.Kill(ingestNode)
					}
				}
				for i, f := range futs {
					select {
					case <-f.Ok():
					case <-f.Err():
						untilAcked(i)
					}
				}
			}
			now := nodeOf(e.m.IngestServer("crash"))
			if now < 0 || now == ingestNode {
				t.Fatalf("the ingest is on node %d after node %d was killed", now, ingestNode)
			}
			t.Logf("node %d (the ingest's) killed after %d events; the ingest reconnected to node %d; %d attempts retried", ingestNode, n/3, now, retried)

			// Read back through the runtime's own connection, once it has
			// reconnected too (it was on the killed node).
			rt, err := e.m.TenantJetStream("crash")
			if err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(15 * time.Second); !rt.Conn().IsConnected(); time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the runtime's connection did not reconnect in 15s")
				}
			}
			c := ctx(t)
			s, err := rt.Stream(c, tenancy.StreamName("orders"))
			if err != nil {
				t.Fatal(err)
			}
			oc, err := s.OrderedConsumer(c, jetstream.OrderedConsumerConfig{})
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]int{}
			deadline := time.Now().Add(30 * time.Second)
			for read := 0; read < n; {
				m, err := oc.Next(jetstream.FetchMaxWait(5 * time.Second))
				if err != nil {
					if time.Now().After(deadline) {
						t.Fatalf("reading the stream back after %d events: %v", read, err)
					}
					time.Sleep(100 * time.Millisecond) // the cluster is still settling after the kill
					continue
				}
				read++
				seen[string(m.Data())]++
				if got := m.Headers().Get(tenancy.HeaderTenant); got != "crash" {
					t.Fatalf("stored event %q has Platform-Tenant %q", m.Data(), got)
				}
			}
			info, err := s.Info(c)
			if err != nil {
				t.Fatal(err)
			}
			lost, dups := 0, int(info.State.Msgs)-n
			for i := range n {
				if seen[id(i)] == 0 {
					lost++
				}
			}
			if lost != 0 || dups != 0 {
				t.Fatalf("after the ingest's node was killed: %d acknowledged events lost, %d duplicates stored (stream holds %d)", lost, dups, info.State.Msgs)
			}
			us, err := e.m.Usage(c, "crash")
			if err != nil || len(us) != 1 {
				t.Fatalf("usage: %v %v", us, err)
			}
			if us[0].Rejected != 0 || us[0].Dropped != 0 {
				t.Fatalf("usage: %d refused, %d dropped; want none (queued events wait for the reconnect)", us[0].Rejected, us[0].Dropped)
			}
		})
	}
}
