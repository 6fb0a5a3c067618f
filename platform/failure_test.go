package platform

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/msgplatform/platform/embeddednats/natstest"
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
	var leader int
	natstest.WaitFor(t, 10*time.Second, func() error {
		for i, n := range f.Nodes() {
			if s := n.Server(); s != nil && s.JetStreamIsStreamLeader("$G", stream) {
				leader = i
				return nil
			}
			if s := n.Server(); s != nil {
				if acc := f.Trust().AdminAccount(); s.JetStreamIsStreamLeader(acc, stream) {
					leader = i
					return nil
				}
			}
		}
		return errors.New("no stream leader")
	})
	return leader
}

// Losing one node of three, right before or in the middle of an Apply,
// does not fail it: the surviving quorum takes every change, and the
// reconciler retries what the lost node or the leader elections it causes
// made fail.
func TestApplySurvivesNodeLoss(t *testing.T) {
	f := natstest.RunFabric(t, 3)
	r, _ := newTestReconciler(t, f)
	ctx := testCtx(t, 90*time.Second)
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
	next.Groups["loyalty"] = GroupSpec{Name: "loyalty", Topic: "orders"}
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
	if sc := streamConfig(t, js, "orders"); sc.MaxAge != 24*time.Hour {
		t.Errorf("orders max_age %s", sc.MaxAge)
	}
	if cc := consumerConfig(t, js, "shipment-jobs", QueueConsumer); cc.AckWait != 2*time.Minute {
		t.Errorf("lease %s", cc.AckWait)
	}
	f.Restart(victim)

	// In the middle: start applying four new groups (96 consumers) and
	// kill the node leading the orders stream while it runs.
	more := clone(next)
	for i := range 4 {
		g := fmt.Sprintf("replay-%d", i)
		more.Groups[g] = GroupSpec{Name: g, Topic: "orders"}
	}
	victim = streamLeader(t, f, "orders")
	done := make(chan error, 1)
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
	created := 0
	for _, c := range got {
		if c.Kind == KindGroup && c.Action != ActionUnchanged {
			created++
		}
	}
	if created != 4 {
		t.Errorf("want 4 groups created, got %v", got)
	}
	// And the result is complete: a further apply has nothing to do.
	again, err := r.Apply(ctx, more, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range again {
		if c.Action != ActionUnchanged {
			t.Errorf("after node loss, re-apply: %s", c)
		}
	}
}
