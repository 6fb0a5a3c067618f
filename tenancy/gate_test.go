package tenancy_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/tenancy"
)

// A tenant member's pull passes the gate and still reaches its consumer
// after the member's interest in the pull's reply inbox: on a 3-node
// fabric whose route from the member's node to the consumer leader's node
// is slow (a congested or distant link: interest and messages on it arrive
// late, in order), every Fetch brings its event. A gate that forwarded the
// pull from a third node would overtake the member's interest (RS+) on
// that slow route, and the leader would drop the pull as having no one
// to deliver to (nats-server removes a waiting pull whose reply has no
// interest): the Fetch would bring nothing and wait out its expiry.
func TestGatePullArrivesAfterReplyInterest(t *testing.T) {
	e := start(t, 3)
	c := ctx(t)
	if _, err := e.m.Create(c, "test", tenancy.Spec{Name: "acme", Quota: tenancy.DefaultQuota()}); err != nil {
		t.Fatal(err)
	}
	orders := platform.DefaultTopicSpec("orders")
	orders.Partitions, orders.Replicas = 1, 3
	if _, err := e.m.ApplyTopic(c, "test", "acme", orders, catalog.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.ApplyGroup(c, "test", "acme", platform.GroupSpec{Name: "g", Topic: "orders"}, catalog.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	tjs, err := e.m.TenantJetStream("acme")
	if err != nil {
		t.Fatal(err)
	}
	stream, pc := tenancy.StreamName("orders"), platform.PartitionConsumer("g", 0)
	pcons, err := tjs.Consumer(c, stream, pc)
	if err != nil {
		t.Fatal(err)
	}
	info, err := pcons.Info(c)
	if err != nil {
		t.Fatal(err)
	}
	leader := -1
	for i, n := range e.f.Nodes() {
		if s := n.Server(); s != nil && info.Cluster != nil && s.Name() == info.Cluster.Leader {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatalf("consumer %s has no leader among the nodes: %+v", pc, info.Cluster)
	}
	// The member sits on a node that leads neither the consumer nor
	// (where it can be avoided) the tenant's ingest, and its route to the
	// leader is slow.
	member := -1
	for i, n := range e.f.Nodes() {
		if i != leader && (member < 0 || n.Server().Name() != e.m.IngestServer("acme")) {
			member = i
		}
	}
	t.Logf("consumer leader node %d, member node %d, ingest on %s", leader, member, e.m.IngestServer("acme"))
	const events = 10
	for i := range events {
		if _, err := tjs.Publish(c, tenancy.StoredName("orders")+".k", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	creds := e.user("acme", "member", nil, []string{"g"})
	nc := e.mustConnect(creds, "member", member)
	mjs := natstest.JetStream(t, nc)
	cons, err := mjs.Consumer(c, stream, pc)
	if err != nil {
		t.Fatal(err)
	}
	group := cons.CachedInfo().Config.PriorityGroups[0]
	e.f.Delay(member, leader, 150*time.Millisecond)
	t.Cleanup(func() { e.f.Delay(member, leader, 0) })

	read := 0
	for pull := 1; read < events; pull++ {
		b, err := cons.Fetch(1, jetstream.FetchMaxWait(3*time.Second), jetstream.FetchPriorityGroup(group))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range b.Messages() {
			if err := m.DoubleAck(c); err != nil {
				t.Fatalf("ack of pull %d: %v", pull, err)
			}
			n++
		}
		if n == 0 {
			ci, _ := pcons.Info(c)
			t.Fatalf("pull %d brought nothing after %d of %d events (%v); consumer: %d waiting, %d pending",
				pull, read, events, b.Error(), ci.NumWaiting, ci.NumPending)
		}
		read += n
	}
	info, err = pcons.Info(c)
	if err != nil {
		t.Fatal(err)
	}
	if info.AckFloor.Stream != events || info.NumPending != 0 || info.NumAckPending != 0 {
		t.Fatalf("consumer after the drain: ack floor %d (want %d), %d pending, %d ack pending",
			info.AckFloor.Stream, events, info.NumPending, info.NumAckPending)
	}
}
