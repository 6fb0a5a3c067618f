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
// stored exactly once: 0 lost, 0 duplicates.
func TestIngestSurvivesItsNodeKilled(t *testing.T) {
	e := start(t, 3)
	e.tenant("crash", tenancy.DefaultQuota())
	creds := e.user("crash", "app", []string{"orders"}, nil)
	rt, err := e.m.TenantJetStream("crash")
	if err != nil {
		t.Fatal(err)
	}
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
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	const n = 300
	retried := 0
	for i := range n {
		if i == n/3 {
			e.f.Kill(ingestNode)
		}
		id := fmt.Sprintf("crash-%d", i)
		deadline := time.Now().Add(30 * time.Second)
		for {
			pctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := js.Publish(pctx, fmt.Sprintf("orders.k%d", i%7), []byte(id), jetstream.WithMsgID(id))
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("event %d not acknowledged within 30s of its first attempt (node %d killed): %v", i, ingestNode, err)
			}
			retried++
			time.Sleep(50 * time.Millisecond)
		}
	}
	now := nodeOf(e.m.IngestServer("crash"))
	if now < 0 || now == ingestNode {
		t.Fatalf("the ingest is on node %d after node %d was killed", now, ingestNode)
	}
	t.Logf("node %d (the ingest's) killed after %d events; the ingest reconnected to node %d; %d attempts retried", ingestNode, n/3, now, retried)

	// Read back through the runtime's own connection, once it has
	// reconnected too (it was on the killed node).
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
		if seen[fmt.Sprintf("crash-%d", i)] == 0 {
			lost++
		}
	}
	if lost != 0 || dups != 0 {
		t.Fatalf("after the ingest's node was killed: %d acknowledged events lost, %d duplicates stored (stream holds %d)", lost, dups, info.State.Msgs)
	}
}
