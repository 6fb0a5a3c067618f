package redrive

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/platform/dlq"
)

// A redrive of a whole DLQ at an unlimited rate reports completed only
// once every entry was sent exactly once and is gone from the DLQ (the
// deletions behind the sends are not left after the completion).
func TestUnlimitedRedriveEmptiesDLQBeforeCompleting(t *testing.T) {
	t.Parallel()
	const n = 400
	e := ordersEnv(t, n)
	s := e.service(nil)
	ctx := natstest.Context(t, 60*time.Second)
	st := startRun(t, ctx, s, req("orders", "alice", Selection{All: true}))
	if st.Total != n {
		t.Fatalf("froze %d entries, want %d", st.Total, n)
	}
	done := waitState(t, s, st.ID, StateCompleted, 30*time.Second)
	if left := streamMsgs(t, ctx, e.js, "orders_dlq"); left != 0 {
		t.Errorf("completed, but %d of %d entries are still in the DLQ", left, n)
	}
	if done.Progress.Sent != n || done.Progress.Skipped != 0 {
		t.Errorf("sent %d skipped %d, want %d and 0", done.Progress.Sent, done.Progress.Skipped, n)
	}
	got, distinct := e.redrivenOnce("orders", st.ID)
	if distinct != n || len(got) != n {
		t.Errorf("%d events stored for %d distinct entries, want %d", len(got), distinct, n)
	}
}

// A dlq.owner in the spec (stored on the DLQ stream as platform.owner)
// names the DLQ's owner, not the topic's owner; without one the DLQ
// inherits the topic's.
func TestDLQOwnerFromDLQSpec(t *testing.T) {
	t.Parallel()
	payments := topic("payments", "payments-team", "")
	payments.DLQ.Owner = "payments-oncall"
	e := newEnv(t, payments, topic("orders", "checkout", ""))
	s := e.service(nil)
	ctx := natstest.Context(t, 30*time.Second)
	dlqs, err := s.ListDLQs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	owners := map[string]string{}
	for _, d := range dlqs {
		owners[d.Name] = d.Owner
	}
	if owners["payments"] != "payments-oncall" || owners["orders"] != "checkout" {
		t.Errorf("owners %v, want payments: payments-oncall (its dlq.owner), orders: checkout (the topic's)", owners)
	}
	e.deadLetter("payments", "ledger", 0, 1, permanent("card %d declined"))
	st, err := s.Submit(ctx, req("payments", "alice", Selection{All: true}))
	if err != nil {
		t.Fatal(err)
	}
	if st.Owner != "payments-oncall" {
		t.Errorf("request owner %q, want payments-oncall", st.Owner)
	}
}

// Redriven entries leave the DLQ by purge only where nothing else lies
// beneath them: a fingerprint selection with other entries between, or a
// range above older entries, removes exactly what it sent.
func TestRedriveRemovesOnlyWhatItSent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, topic("orders", "checkout", ""))
	e.deadLetter("orders", "email-notifier", 0, 120, func(i int) (dlq.ErrorClass, string) {
		if i%2 == 0 {
			return dlq.ClassPermanent, "card declined"
		}
		return dlq.ClassTransient, "ledger timed out"
	})
	s := e.service(nil)
	ctx := natstest.Context(t, 60*time.Second)
	declined := Fingerprint(string(dlq.ClassPermanent), "card declined")
	run := func(sel Selection, want int) {
		t.Helper()
		st := startRun(t, ctx, s, req("orders", "alice", sel))
		done := waitState(t, s, st.ID, StateCompleted, 30*time.Second)
		if done.Progress.Sent != want || len(e.redriven("orders", st.ID)) != want {
			t.Fatalf("%+v: sent %d, want %d", sel, done.Progress.Sent, want)
		}
	}
	// remaining reports the DLQ's entries by reason.
	remaining := func() map[uint64]string {
		t.Helper()
		out := map[uint64]string{}
		if err := scan(ctx, e.js, "orders_dlq", 1, func(m *jetstream.RawStreamMsg) bool {
			out[m.Sequence] = m.Header.Get(dlq.HeaderReason)
			return true
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	run(Selection{Fingerprint: declined, FromSeq: 41}, 40)
	left := remaining()
	for seq := uint64(1); seq <= 120; seq++ {
		_, there := left[seq]
		if wantThere := seq <= 40 || seq%2 == 0; there != wantThere {
			t.Fatalf("after the fingerprint redrive: entry %d present %v, want %v", seq, there, wantThere)
		}
	}
	run(Selection{FromSeq: 81}, 20)
	left = remaining()
	if len(left) != 60 {
		t.Fatalf("after the range redrive: %d entries left, want 60", len(left))
	}
	for seq := range left {
		if seq > 80 {
			t.Fatalf("entry %d still there", seq)
		}
	}
	run(Selection{All: true}, 60)
	if left := streamMsgs(t, ctx, e.js, "orders_dlq"); left != 0 {
		t.Fatalf("after redriving all: %v entries left", left)
	}
}
