package redrive

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/platform"
)

// A tenant-scoped service: DLQs are named without the account's stored
// prefix, a destination gets it, requests live in the tenant's own bucket
// (another scope's service does not list them), audit records carry the
// tenant and each scope's History shows its own only; the run sends every
// entry once.
func TestTenantScope(t *testing.T) {
	t.Parallel()
	e := newEnv(t, topic("stored.payments", "payments-team", ""))
	e.deadLetter("stored.payments", "ledger", 0, 6, permanent("card number %d is not a number"))
	scoped := func(tenant string) func(*Config) {
		return func(c *Config) { c.Tenant, c.NamePrefix, c.Control = tenant, "stored.", e.js }
	}
	harbor := e.service(scoped("harbor"))
	meridian := e.service(scoped("meridian"))
	admin := e.service(nil)
	ctx := natstest.Context(t, 60*time.Second)

	ds, err := harbor.ListDLQs(ctx)
	if err != nil || len(ds) != 1 || ds[0].Name != "payments" || ds[0].Depth != 6 {
		t.Fatalf("harbor's DLQs: %+v, %v; want payments with 6 entries", ds, err)
	}
	if _, err := harbor.Show(ctx, "payments", 1); err != nil {
		t.Fatalf("show by the tenant's name: %v", err)
	}
	pv, err := harbor.Preview(ctx, Request{DLQ: "payments", Selection: Selection{Seqs: []uint64{1}}, Destination: "payments.order:0", Reason: "r", Requester: "alice@harbor"})
	if err != nil || pv.Destinations[0].Subject != "stored.payments.order:0" {
		t.Fatalf("destination in the tenant's account: %+v, %v", pv.Destinations, err)
	}
	st, err := harbor.Submit(ctx, req("payments", "alice@harbor", Selection{All: true}))
	if err != nil {
		t.Fatal(err)
	}
	if st.Tenant != "harbor" || st.Object != "payments" || st.StoredObject != "stored.payments" {
		t.Fatalf("record: tenant %q object %q stored %q", st.Tenant, st.Object, st.StoredObject)
	}
	for name, s := range map[string]*Service{"admin": admin, "meridian": meridian} {
		if _, err := s.Get(ctx, st.ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s's service finds harbor's request: %v", name, err)
		}
		if l, _ := s.List(ctx, ListFilter{}); len(l) != 0 {
			t.Errorf("%s's service lists %d requests, want 0", name, len(l))
		}
	}
	if _, err := harbor.Run(ctx, st.ID, "alice@harbor", ""); err != nil {
		t.Fatal(err)
	}
	done := waitState(t, harbor, st.ID, StateCompleted, 30*time.Second)
	if done.Progress.Sent != 6 {
		t.Fatalf("sent %d, want 6", done.Progress.Sent)
	}
	if n := streamMsgs(t, ctx, e.js, platform.StreamName("stored.payments")); n != 12 {
		t.Fatalf("topic holds %d, want 6 originals + 6 redriven", n)
	}
	mine, _ := harbor.History(ctx, HistoryFilter{})
	if len(mine) == 0 {
		t.Fatal("harbor's history is empty")
	}
	for _, r := range mine {
		if r.Tenant != "harbor" {
			t.Fatalf("harbor's history holds a record of %q", r.Tenant)
		}
	}
	if other, _ := meridian.History(ctx, HistoryFilter{}); len(other) != 0 {
		t.Fatalf("meridian's history holds %d records of harbor", len(other))
	}
	if all, _ := admin.History(ctx, HistoryFilter{ID: st.ID}); len(all) != len(mine) {
		t.Fatalf("the admin scope sees %d of harbor's %d records", len(all), len(mine))
	}
	cfg := DefaultConfig()
	cfg.Tenant, cfg.NamePrefix = "bad.name", "stored"
	if _, err := New(e.js, cfg); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "tenant") || !strings.Contains(err.Error(), "name_prefix") {
		t.Fatalf("bad scope config: %v", err)
	}
}
