package catalog

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/platform"
)

// metaLeader returns the index of the node leading the JetStream meta
// group.
func metaLeader(t *testing.T, f *natstest.Fabric) int {
	t.Helper()
	var leader int
	natstest.WaitFor(t, 10*time.Second, func() error {
		for i, n := range f.Nodes() {
			if s := n.Server(); s != nil && s.JetStreamIsLeader() {
				leader = i
				return nil
			}
		}
		return errors.New("no meta leader")
	})
	return leader
}

// streamLeader returns the index of the node leading stream's Raft group.
func streamLeader(t *testing.T, f *natstest.Fabric, stream string) int {
	t.Helper()
	acc := f.Trust().AdminAccount()
	var leader int
	natstest.WaitFor(t, 10*time.Second, func() error {
		for i, n := range f.Nodes() {
			if s := n.Server(); s != nil && s.JetStreamIsStreamLeader(acc, stream) {
				leader = i
				return nil
			}
		}
		return errors.New("no stream leader")
	})
	return leader
}

// waitHealthy waits until every running node reports every stream and
// consumer it hosts as current: only then can the fabric lose another
// node without losing a quorum somewhere.
func waitHealthy(t *testing.T, f *natstest.Fabric) {
	t.Helper()
	natstest.WaitFor(t, 30*time.Second, func() error {
		for _, n := range f.Nodes() {
			if s := n.Server(); s != nil {
				if h := s.Healthz(nil); h.Status != "ok" {
					return fmt.Errorf("%s: %s %s", n.Name(), h.Status, h.Error)
				}
			}
		}
		return nil
	})
}

// Losing one node of three, right before or in the middle of an Apply,
// does not fail it: the surviving quorum takes every change, and the
// reconciler retries what the lost node or the leader elections it causes
// made fail.
func TestApplySurvivesNodeLoss(t *testing.T) {
	f := natstest.RunFabric(t, 3)
	r, _ := newTestReconciler(t, f)
	ctx := natstest.Context(t, 90*time.Second)
	cat := harborCart()
	if _, err := r.Apply(ctx, cat, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}

	// Right before: kill the meta leader (every change below needs a new
	// one elected), then apply updates to every kind and a new group.
	victim := metaLeader(t, f)
	f.Kill(victim)
	next := clone(cat)
	o := next.Topics["orders"]
	o.Retention.MaxAge = 24 * time.Hour
	next.Topics["orders"] = o
	q := next.Queues["shipment-jobs"]
	q.Lease = 2 * time.Minute
	next.Queues["shipment-jobs"] = q
	next.Groups["loyalty"] = platform.GroupSpec{Name: "loyalty", Topic: "orders"}
	began := time.Now()
	changes, err := r.Apply(ctx, next, ApplyOptions{})
	if err != nil {
		t.Fatalf("apply with node %d down: %v", victim, err)
	}
	t.Logf("apply with the meta leader down took %s", time.Since(began))
	if a := actions(changes); a["topic orders"] != ActionUpdate || a["queue shipment-jobs"] != ActionUpdate || a["group loyalty"] != ActionCreate {
		t.Errorf("actions: %v", a)
	}
	js := f.JetStream()
	if sc := natstest.StreamConfig(t, js, "orders"); sc.MaxAge != 24*time.Hour {
		t.Errorf("orders max_age %s", sc.MaxAge)
	}
	if cc := natstest.ConsumerConfig(t, js, "shipment-jobs", platform.QueueConsumer); cc.AckWait != 2*time.Minute {
		t.Errorf("lease %s", cc.AckWait)
	}
	began = time.Now()
	f.Restart(victim)
	// A node that is back but still catching up is not a replica yet:
	// losing another one now would be losing two.
	waitHealthy(t, f)

	// In the middle: start applying four new groups (96 consumers) and
	// kill the node leading the orders stream while it runs.
	more := clone(next)
	for i := range 4 {
		g := fmt.Sprintf("replay-%d", i)
		more.Groups[g] = platform.GroupSpec{Name: g, Topic: "orders"}
	}
	t.Logf("restart and catch-up took %s", time.Since(began))
	victim = streamLeader(t, f, "orders")
	done := make(chan error, 1)
	began = time.Now()
	var got []Change
	go func() {
		var err error
		got, err = r.Apply(ctx, more, ApplyOptions{})
		done <- err
	}()
	time.Sleep(100 * time.Millisecond)
	f.Kill(victim)
	if err := <-done; err != nil {
		t.Fatalf("apply while node %d died: %v", victim, err)
	}
	t.Logf("apply losing the stream leader midway took %s", time.Since(began))
	created := 0
	for _, c := range got {
		if c.Kind == KindGroup && c.Action != ActionUnchanged {
			created++
		}
	}
	if created != 4 {
		t.Errorf("want 4 groups created, got %v", got)
	}
	// A new R3 topic is created on the surviving quorum too: the server
	// places the third replica on the down node, which catches up when
	// it is back.
	pay := platform.DefaultTopicSpec("payments")
	if ch, err := r.ApplyTopic(ctx, pay, ApplyOptions{}); err != nil || ch.Action != ActionCreate {
		t.Fatalf("new R3 topic with a node down: %v %v", ch, err)
	}
	if sc := natstest.StreamConfig(t, js, "payments"); sc.Replicas != 3 {
		t.Errorf("payments replicas %d", sc.Replicas)
	}
	more.Topics["payments"] = pay

	// And the result is complete: a further apply has nothing to do.
	applyWant(t, ctx, r, more, ActionUnchanged, "after node loss, re-apply")
}
