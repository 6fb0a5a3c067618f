package redrive_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/jsscan"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/redrive"
	"github.com/msgplatform/platform/redrive/redrivetest"
)

// auditActions returns the group_reset records of the audit stream
// (subjects AuditSubject.<tenant>.group_reset.<step>), in order.
func auditActions(t *testing.T, ctx context.Context, js jetstream.JetStream) []redrive.AuditRecord {
	t.Helper()
	var out []redrive.AuditRecord
	err := jsscan.Range(ctx, js, redrive.AuditStream, 1, jsscan.Options{}, func(m *jetstream.RawStreamMsg) bool {
		tok := strings.Split(strings.TrimPrefix(m.Subject, redrive.AuditSubject+"."), ".")
		if len(tok) < 3 || tok[1] != "group_reset" {
			return true
		}
		var r redrive.AuditRecord
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// topicWithEvents starts a one-node fabric, applies ts with the groups
// named on it and publishes n events keyed <key>:<i> ("x") to it; the
// context it returns ends after 60 s or with the test.
func topicWithEvents(t *testing.T, ts platform.TopicSpec, key string, n int, groups ...string) (jetstream.JetStream, context.Context, *catalog.Reconciler) {
	t.Helper()
	js := natstest.RunFabric(t, 1).JetStream()
	ctx := natstest.Context(t, 60*time.Second)
	rec := catalog.NewReconciler(js, catalog.ReconcilerOptions{DefaultReplicas: 1})
	cat := platform.Catalog{Topics: map[string]platform.TopicSpec{ts.Name: ts}, Groups: map[string]platform.GroupSpec{}}
	for _, g := range groups {
		cat.Groups[g] = platform.GroupSpec{Name: g, Topic: ts.Name}
	}
	if _, err := rec.Apply(ctx, cat, catalog.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := js.Publish(ctx, platform.TopicSubject(ts.Name, fmt.Sprintf("%s:%d", key, i)), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	return js, ctx, rec
}

func pending(t *testing.T, ctx context.Context, js jetstream.JetStream, group string, partitions int) []uint64 {
	t.Helper()
	out := make([]uint64, partitions)
	for p := range partitions {
		c, err := js.Consumer(ctx, "payments", platform.PartitionConsumer(group, p))
		if err != nil {
			t.Fatal(err)
		}
		ci, err := c.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out[p] = ci.NumPending + uint64(ci.NumAckPending)
	}
	return out
}

// A group reset on a topic marked review: required runs only through an
// approved request: the requester cannot approve it, an unapproved
// request does not run, the approved one runs once (a second execution is
// refused and does not move anything), the other group on the topic is
// untouched, and request, approval and execution are audited with the
// per-partition positions before and after.
func TestReviewGatedGroupReset(t *testing.T) {
	payments := platform.DefaultTopicSpec("payments")
	payments.Replicas, payments.Partitions, payments.Review = 1, 2, platform.ReviewRequired
	js, ctx, rec := topicWithEvents(t, payments, "pay", 20, "a", "b")
	natstest.WaitFor(t, 10*time.Second, func() error {
		a, b := pending(t, ctx, js, "a", 2), pending(t, ctx, js, "b", 2)
		if a[0]+a[1] != 20 || b[0]+b[1] != 20 {
			return fmt.Errorf("pending a %v b %v, want 20 each", a, b)
		}
		return nil
	})
	before := pending(t, ctx, js, "b", 2)

	s := redrivetest.StartService(t, ctx, js)

	move := catalog.GroupResetRequest{Group: "a", Topic: "payments", ToEnd: true}
	if _, err := s.RunReset(ctx, move, "alice", "just do it", rec.ResetGroup); !errors.Is(err, catalog.ErrApprovalRequired) {
		t.Fatalf("direct reset: %v, want ErrApprovalRequired", err)
	}
	dry := move
	dry.DryRun = true
	if plan, err := s.RunReset(ctx, dry, "", "", rec.ResetGroup); err != nil || !plan.ReviewRequired || plan.ToProcess != 0 {
		t.Fatalf("dry run: %+v, %v", plan, err)
	}
	if _, err := s.RequestReset(ctx, move, "alice", ""); !errors.Is(err, redrive.ErrInvalid) {
		t.Fatalf("request without reason: %v, want ErrInvalid", err)
	}
	req, err := s.RequestReset(ctx, move, "alice", "skip the poisoned backlog of incident 42")
	if err != nil || req.State != redrive.ResetRequested {
		t.Fatalf("request: %+v, %v", req, err)
	}
	var calls atomic.Int32
	resetter := func(ctx context.Context, r catalog.GroupResetRequest) (catalog.GroupReset, error) {
		calls.Add(1)
		return rec.ResetGroupApproved(ctx, r)
	}
	if _, err := s.ExecuteReset(ctx, req.ID, "alice", resetter); !errors.Is(err, redrive.ErrConflict) {
		t.Fatalf("execute unapproved: %v, want ErrConflict", err)
	}
	if _, err := s.ApproveReset(ctx, req.ID, "alice", "lgtm"); !errors.Is(err, redrive.ErrForbidden) {
		t.Fatalf("self-approval: %v, want ErrForbidden", err)
	}
	if r, err := s.ApproveReset(ctx, req.ID, "bob", "checked with payments on-call"); err != nil || r.State != redrive.ResetApproved {
		t.Fatalf("approve: %+v, %v", r, err)
	}
	if _, err := s.ApproveReset(ctx, req.ID, "carol", "me too"); !errors.Is(err, redrive.ErrConflict) {
		t.Fatalf("second approval: %v, want ErrConflict", err)
	}
	out, err := s.ExecuteReset(ctx, req.ID, "alice", resetter)
	if err != nil || out.ToProcess != 0 || len(out.Partitions) != 2 {
		t.Fatalf("execute: %+v, %v", out, err)
	}
	if _, err := s.ExecuteReset(ctx, req.ID, "alice", resetter); !errors.Is(err, redrive.ErrConflict) {
		t.Fatalf("second execute: %v, want ErrConflict", err)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the group was reset %d times, want once", n)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if a := pending(t, ctx, js, "a", 2); a[0]+a[1] != 0 {
			return fmt.Errorf("group a pending %v after reset to end, want 0", a)
		}
		return nil
	})
	if b := pending(t, ctx, js, "b", 2); b[0] != before[0] || b[1] != before[1] {
		t.Fatalf("group b pending %v, was %v: another group moved", b, before)
	}
	got, err := s.GetReset(ctx, req.ID)
	if err != nil || got.State != redrive.ResetExecuted || got.Executor != "alice" || got.Approver != "bob" || got.Result == nil {
		t.Fatalf("stored request: %+v, %v", got, err)
	}

	recs := auditActions(t, ctx, js)
	var actions []string
	for _, r := range recs {
		if r.Target == req.ID {
			actions = append(actions, r.Action+":"+r.Actor)
		}
	}
	want := []string{"group_reset.request:alice", "group_reset.approve:bob", "group_reset.execute:alice"}
	if fmt.Sprint(actions) != fmt.Sprint(want) {
		t.Fatalf("audit %v, want %v", actions, want)
	}
	exec := recs[len(recs)-1]
	var pos struct{ Before, After []redrive.ResetPosition }
	b, _ := json.Marshal(map[string]any{"Before": exec.Before, "After": exec.After})
	if err := json.Unmarshal(b, &pos); err != nil || len(pos.Before) != 2 || len(pos.After) != 2 {
		t.Fatalf("execute record positions: %s (%v), want 2 partitions before and after", b, err)
	}
	for p := range 2 {
		if pos.Before[p].Seq != 1 || pos.After[p].Seq != 21 {
			t.Errorf("partition %d: before %d after %d, want 1 -> 21 (past the 20 stored events)", p, pos.Before[p].Seq, pos.After[p].Seq)
		}
	}
}

// A direct reset of a topic not under review needs who and why, and is
// audited with the positions before and after; a dry run is not.
func TestDirectGroupResetIsAudited(t *testing.T) {
	orders := platform.DefaultTopicSpec("orders")
	orders.Replicas = 1
	js, ctx, rec := topicWithEvents(t, orders, "o", 5, "g")
	s := redrivetest.StartService(t, ctx, js)
	move := catalog.GroupResetRequest{Group: "g", ToEnd: true}
	if _, err := s.RunReset(ctx, move, "alice", "", rec.ResetGroup); !errors.Is(err, redrive.ErrInvalid) {
		t.Fatalf("reset without a reason: %v, want ErrInvalid", err)
	}
	dry := move
	dry.DryRun = true
	if _, err := s.RunReset(ctx, dry, "alice", "", rec.ResetGroup); err != nil {
		t.Fatalf("dry run: %v", err)
	}
	if _, err := s.RunReset(ctx, move, "alice", "skip the load-test events", rec.ResetGroup); err != nil {
		t.Fatal(err)
	}
	recs := auditActions(t, ctx, js)
	if len(recs) != 1 || recs[0].Action != "group_reset.direct" || recs[0].Actor != "alice" || recs[0].Target != "g" {
		t.Fatalf("audit %+v, want one group_reset.direct by alice", recs)
	}
	b, _ := json.Marshal(recs[0].After)
	if string(b) != `[{"partition":0,"seq":6}]` {
		t.Fatalf("after positions %s, want partition 0 at seq 6", b)
	}
}
