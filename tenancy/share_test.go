package tenancy_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/tenancy"
)

// A topic shared from harbor-retail to meridian is readable by meridian
// only, carries the owner's stamp, stops on revoke; nothing else of the
// owner becomes readable; the share is listed and audited.
func TestShareTopic(t *testing.T) {
	e := start(t, 3)
	e.tenant("harbor-retail", tenancy.DefaultQuota())
	e.tenant("meridian", tenancy.DefaultQuota())
	e.tenant("acme", tenancy.DefaultQuota())
	prod := e.user("harbor-retail", "producer", []string{"orders"}, nil)

	var a attempts
	// Nothing shared yet: no reader can name it.
	a.try(t, "user of meridian on unshared harbor-retail/orders", errOf(e.m.AddUser(ctx(t), "test", "meridian", tenancy.UserSpec{Name: "early", Sub: []string{"harbor-retail/orders"}})))
	sh, err := e.m.ShareTopic(ctx(t), "test", tenancy.ShareRequest{From: "harbor-retail", To: "meridian", Topic: "orders"})
	if err != nil {
		t.Fatalf("share: %v", err)
	}
	if _, err := e.m.ShareTopic(ctx(t), "test", tenancy.ShareRequest{From: "harbor-retail", To: "meridian", Topic: "orders"}); !errors.Is(err, tenancy.ErrConflict) {
		t.Errorf("second share: %v, want ErrConflict", err)
	}
	for name, r := range map[string]tenancy.ShareRequest{
		"queue":   {From: "harbor-retail", To: "meridian", Topic: "shipment-jobs"},
		"self":    {From: "meridian", To: "meridian", Topic: "orders"},
		"unknown": {From: "harbor-retail", To: "nobody", Topic: "orders"},
	} {
		if _, err := e.m.ShareTopic(ctx(t), "test", r); err == nil {
			t.Errorf("share %s succeeded", name)
		}
	}
	if ls, err := e.m.Shares(ctx(t), ""); err != nil || len(ls) != 1 || ls[0] != sh {
		t.Fatalf("shares = %+v, %v", ls, err)
	}

	reader := e.user("meridian", "reader", nil, []string{"harbor-retail/orders"})
	a.try(t, "acme user on harbor-retail/orders", errOf(e.m.AddUser(ctx(t), "test", "acme", tenancy.UserSpec{Name: "x", Sub: []string{"harbor-retail/orders"}})))
	a.try(t, "meridian user on unshared harbor-retail/shipment-jobs", errOf(e.m.AddUser(ctx(t), "test", "meridian", tenancy.UserSpec{Name: "y", Sub: []string{"harbor-retail/shipment-jobs"}})))
	acme := e.user("acme", "snoop", []string{"orders"}, []string{"orders"})

	rc := e.mustConnect(reader, "reader", 0)
	sub, err := rc.SubscribeSync(tenancy.SharedSubject("harbor-retail", "orders"))
	if err != nil {
		t.Fatal(err)
	}
	denied := make(chan error, 4)
	ac := e.mustConnect(acme, "snoop", 0, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { denied <- err }))
	asub, _ := ac.SubscribeSync("shared.>")
	_ = ac.Flush()
	select {
	case err := <-denied:
		t.Logf("acme subscribing to shared.>: %v", err)
		a.try(t, "acme subscribe shared.>", err)
	case <-time.After(time.Second):
		a.try(t, "acme subscribe shared.>", nil)
	}
	_ = rc.Flush()

	pjs := e.jetStream(prod, "producer", 0)
	m := nats.NewMsg("orders.k1")
	m.Header.Set(tenancy.HeaderTenant, "meridian") // spoof: must be overwritten
	m.Data = []byte("shared-1")
	if _, err := pjs.PublishMsg(ctx(t), m); err != nil {
		t.Fatal(err)
	}
	got, err := sub.NextMsg(3 * time.Second)
	if err != nil {
		t.Fatalf("meridian did not receive the shared event: %v", err)
	}
	if string(got.Data) != "shared-1" || got.Header.Get(tenancy.HeaderTenant) != "harbor-retail" {
		t.Fatalf("got %q with tenant %q", got.Data, got.Header.Get(tenancy.HeaderTenant))
	}
	if _, err := asub.NextMsg(300 * time.Millisecond); err == nil {
		a.try(t, "acme received a shared event", nil)
	}

	if _, err := e.m.ShareTopic(ctx(t), "test", tenancy.ShareRequest{From: "harbor-retail", To: "meridian", Topic: "orders", Revoke: true}); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	if _, err := pjs.Publish(ctx(t), "orders.k2", []byte("after-revoke")); err != nil {
		t.Fatal(err)
	}
	if msg, err := sub.NextMsg(700 * time.Millisecond); err == nil {
		a.try(t, "meridian read after revoke: "+string(msg.Data), nil)
	}
	if ls, _ := e.m.Shares(ctx(t), "meridian"); len(ls) != 0 {
		t.Errorf("shares after revoke: %+v", ls)
	}
	recs, err := e.m.Audit(ctx(t), tenancy.AuditFilter{Tenant: "meridian"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range recs {
		if r.Action == "share.grant" || r.Action == "share.revoke" {
			n++
		}
	}
	if n != 2 {
		t.Errorf("audit of meridian has %d share records, want 2", n)
	}
	t.Logf("forbidden attempts: %d, succeeded: %d", a.tried, a.succeeded)
}

// Deleting a tenant ends the shares it takes part in, as owner and as
// reader: no share is left listed or in a record, the reader's account
// no longer imports (its subscription gets nothing more), each end is
// audited under the other tenant, and a tenant created again with the
// deleted one's name has no share.
func TestDeleteEndsItsShares(t *testing.T) {
	e := start(t, 3)
	for _, n := range []string{"owner", "reader", "upstream"} {
		e.tenant(n, tenancy.DefaultQuota())
	}
	for _, r := range []tenancy.ShareRequest{
		{From: "owner", To: "reader", Topic: "orders"},
		{From: "upstream", To: "owner", Topic: "orders"},
	} {
		if _, err := e.m.ShareTopic(ctx(t), "test", r); err != nil {
			t.Fatalf("share %s/%s with %s: %v", r.From, r.Topic, r.To, err)
		}
	}
	rd := e.user("reader", "reader", nil, []string{"owner/orders"})
	sub, err := e.mustConnect(rd, "reader", 0).SubscribeSync(tenancy.SharedSubject("owner", "orders"))
	if err != nil {
		t.Fatal(err)
	}
	pjs := e.jetStream(e.user("owner", "producer", []string{"orders"}, nil), "producer", 1)
	if _, err := pjs.Publish(ctx(t), "orders.k1", []byte("before")); err != nil {
		t.Fatal(err)
	}
	if m, err := sub.NextMsg(3 * time.Second); err != nil || string(m.Data) != "before" {
		t.Fatalf("the reader did not get the shared event before the delete: %v", err)
	}

	if err := e.m.Delete(ctx(t), "test", "owner", true); err != nil {
		t.Fatalf("delete owner: %v", err)
	}
	if ls, err := e.m.Shares(ctx(t), ""); err != nil || len(ls) != 0 {
		t.Errorf("shares after the owner's delete: %+v, %v; want none", ls, err)
	}
	for _, n := range []string{"reader", "upstream"} {
		tn, err := e.m.Get(ctx(t), n)
		if err != nil {
			t.Fatal(err)
		}
		if len(tn.Imports) != 0 || len(tn.Exports) != 0 {
			t.Errorf("%s after the owner's delete: imports %+v, exports %v; want none", n, tn.Imports, tn.Exports)
		}
		recs, err := e.m.Audit(ctx(t), tenancy.AuditFilter{Tenant: n})
		if err != nil {
			t.Fatal(err)
		}
		if last := recs[len(recs)-1]; last.Action != "share.revoke" || last.Target == "" {
			t.Errorf("%s's last audit record is %s %s, not the share's end", n, last.Action, last.Target)
		}
	}
	// The reader's account no longer imports: whatever the reader's
	// connection still sees, nothing more arrives on the shared subject.
	if m, err := sub.NextMsg(700 * time.Millisecond); err == nil {
		t.Errorf("the reader got %q after the owner's delete", m.Data)
	}

	e.tenant("owner", tenancy.DefaultQuota())
	if ls, err := e.m.Shares(ctx(t), "owner"); err != nil || len(ls) != 0 {
		t.Errorf("shares of the new tenant named owner: %+v, %v; want none", ls, err)
	}
}

// A suspended tenant is deleted with its data without being resumed
// first (which would let its users back in): no connection may enter its
// account, so its streams are purged through the system account. Without
// --purge the delete still refuses and keeps everything.
func TestDeleteASuspendedTenantPurgesItsData(t *testing.T) {
	e := start(t, 3)
	e.tenant("gone", tenancy.DefaultQuota())
	prod := e.user("gone", "producer", []string{"orders"}, nil)
	pjs := e.jetStream(prod, "producer", 0)
	for i := range 10 {
		if _, err := pjs.Publish(ctx(t), fmt.Sprintf("orders.k%d", i), []byte("data")); err != nil {
			t.Fatal(err)
		}
	}
	tn, err := e.m.Get(ctx(t), "gone")
	if err != nil {
		t.Fatal(err)
	}
	sys, err := embeddednats.ConnectSystem(e.f.Trust(), e.f.Node(1).ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	// streams counts the account's streams as every server's JSZ reports
	// them (each server its own replicas).
	streams := func() int {
		t.Helper()
		inbox := nats.NewInbox()
		sub, err := sys.SubscribeSync(inbox)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		if err := sys.PublishRequest(fmt.Sprintf("$SYS.REQ.ACCOUNT.%s.JSZ", tn.Account), inbox, []byte(`{"streams":true}`)); err != nil {
			t.Fatal(err)
		}
		n := 0
		for range 3 {
			msg, err := sub.NextMsg(2 * time.Second)
			if err != nil {
				t.Fatalf("JSZ of the account: %v", err)
			}
			var r struct {
				Data *struct {
					Streams []json.RawMessage `json:"stream_detail"`
				} `json:"data"`
			}
			if err := json.Unmarshal(msg.Data, &r); err != nil {
				t.Fatal(err)
			}
			if r.Data != nil {
				n += len(r.Data.Streams)
			}
		}
		return n
	}
	held := streams()
	if held == 0 {
		t.Fatal("no server reports the tenant's streams")
	}

	if _, err := e.m.Suspend(ctx(t), "test", "gone"); err != nil {
		t.Fatal(err)
	}
	if err := e.m.Delete(ctx(t), "test", "gone", false); !errors.Is(err, tenancy.ErrConflict) {
		t.Fatalf("delete without purge of a suspended tenant with data: %v, want ErrConflict", err)
	}
	if n := streams(); n != held {
		t.Fatalf("the refused delete changed the data: %d stream replicas, was %d", n, held)
	}
	if err := e.m.Delete(ctx(t), "test", "gone", true); err != nil {
		t.Fatalf("delete --purge of a suspended tenant: %v", err)
	}
	if n := streams(); n != 0 {
		t.Errorf("after delete --purge: %d stream replicas of the account remain, want 0 (was %d)", n, held)
	}
	if _, err := e.m.Get(ctx(t), "gone"); !errors.Is(err, tenancy.ErrNotFound) {
		t.Errorf("the deleted tenant: %v, want ErrNotFound", err)
	}
	if _, err := e.connect(prod, "producer", 0); err == nil {
		t.Errorf("a deleted tenant's user connected")
	}
}
