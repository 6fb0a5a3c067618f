package redrive

import (
	"testing"
	"time"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/platform"
)

// Two platformds of a 3-node region serve redrive commands, each through
// its own node; a command may reach either. The request bucket (R3) is
// read from its stream's leader, so each instance acts on the state the
// other has just written: a request submitted through one is approved
// and rejected through the other at once, with no "not found" and no
// decision taken on the state before the last write.
func TestInstancesActOnEachOthersLastWrite(t *testing.T) {
	t.Parallel()
	ts := topic("payments", "payments-team", platform.ReviewRequired)
	ts.Replicas = 3
	e := newEnvNodes(t, 3, ts)
	f := e.f
	ctx := natstest.Context(t, 90*time.Second)
	e.deadLetter("payments", "ledger", 0, 5, permanent("card number %d is not a number"))

	start := func(node int, name string) *Service {
		js := natstest.JetStream(t, f.NodeConn(node))
		return e.serviceOn(js, func(c *Config) { c.Replicas, c.Instance = 3, name })
	}
	a, b := start(0, "a"), start(2, "b")

	st, err := f.JetStream().Stream(ctx, "KV_"+Bucket)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := st.CachedInfo().Config; cfg.AllowDirect || cfg.Replicas != 3 {
		t.Fatalf("bucket %s: direct gets %v, replicas %d; want off and 3", Bucket, cfg.AllowDirect, cfg.Replicas)
	}

	const rounds = 20
	failures := 0
	for i := range rounds {
		one, other := a, b
		if i%2 == 1 {
			one, other = b, a
		}
		r := req("payments", "alice", Selection{All: true})
		sub, err := one.Submit(ctx, r)
		if err != nil {
			t.Fatalf("round %d: submit: %v", i, err)
		}
		if got, err := other.Approve(ctx, sub.ID, "bob", "checked"); err != nil || got.State != StateApproved {
			failures++
			t.Errorf("round %d: approve through the other instance right after the submit: %v (state %q)", i, err, got.State)
			continue
		}
		if got, err := one.Get(ctx, sub.ID); err != nil || got.State != StateApproved || got.ApprovedBy != "bob" {
			failures++
			t.Errorf("round %d: the submitting instance reads %q approved by %q (%v), want approved by bob", i, got.State, got.ApprovedBy, err)
			continue
		}
		if got, err := one.Cancel(ctx, sub.ID, "alice", "not now"); err != nil || got.State != StateCancelled {
			failures++
			t.Errorf("round %d: cancel through the submitting instance: %v (state %q)", i, err, got.State)
		}
	}
	if failures != 0 {
		t.Fatalf("%d of %d rounds acted on a stale state", failures, rounds)
	}
}
