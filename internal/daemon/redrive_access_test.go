package daemon_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/attack"
	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/daemon/daemontest"
	"github.com/msgplatform/platform/internal/principal"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/redrive"
	"github.com/msgplatform/platform/redrive/redrivetest"
	"github.com/msgplatform/platform/tenancy"
)

// The control API (platformctl dlq|redrive --user-creds) decides as the
// console does, from the signing user's permissions: a publish-only user
// sees no DLQ it cannot consume and files nothing; a user who may consume
// payments redrives neither into a topic it cannot publish to nor above
// the tenant's publish-rate quota; an approval needs another user who may
// see the entries. Nothing is filed, approved or sent by a refused call.
func TestAttackControlRedrive(t *testing.T) {
	d, nc, _, ctx := daemontest.StartAdmin(t, 1, 2*time.Minute, nats.Name("attack-test"))
	m := d.Tenants()
	spec := tenancy.DefaultSpec("harbor")
	spec.Quota.PublishRate = 50
	if _, err := m.Create(ctx, "test", spec); err != nil {
		t.Fatal(err)
	}
	for _, topic := range []string{"payments", "refunds"} {
		ts := platform.DefaultTopicSpec(topic)
		ts.Replicas = 1
		if topic == "payments" {
			ts.Review = platform.ReviewRequired
		}
		if _, err := m.ApplyTopic(ctx, "test", "harbor", ts, catalog.ApplyOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	users := map[string]*principal.Signer{}
	for _, u := range []tenancy.UserSpec{
		{Name: "pat", Pub: []string{"payments"}},
		{Name: "alice", Sub: []string{"payments"}, Pub: []string{"payments"}},
		{Name: "bob", Sub: []string{"payments"}},
		{Name: "sue", Sub: []string{"refunds"}, Pub: []string{"refunds", "payments"}},
	} {
		uc, err := m.AddUser(ctx, "test", "harbor", u)
		if err != nil {
			t.Fatal(err)
		}
		users[u.Name] = signer(t, uc.Creds)
	}
	tnc, err := d.ConnectTenant(ctx, "harbor", "test-harbor")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tnc.Close)
	tjs, _ := jetstream.New(tnc)
	const card = "4111111111111111"
	redrivetest.DeadLetter(t, tjs, tenancy.StoredName("payments"), "ledger", 0, 4, "card "+card+" declined (%d)")

	req := func(dest string, rate float64) redrive.Request {
		return redrive.Request{Scope: "harbor", DLQ: "payments", Selection: redrive.Selection{All: true}, Destination: dest, Rate: rate, Reason: "fixed", Requester: "someone"}
	}
	var filed redrive.Status
	if err := signedCall(ctx, nc, users["alice"], time.Time{}, redrive.SubjRequest, req("", 10), &filed); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		var l []redrive.Status
		if err := control.Call(ctx, nc, redrive.SubjList, redrive.ListFilter{Scope: "harbor"}, &l); err != nil {
			t.Fatal(err)
		}
		return len(l)
	}
	before := count()

	// Browsing as pat: nothing of payments.
	var dlqs []redrive.DLQ
	if err := signedCall(ctx, nc, users["pat"], time.Time{}, redrive.SubjDLQList, redrive.ScopeRequest{Scope: "harbor"}, &dlqs); err != nil || len(dlqs) != 0 {
		t.Errorf("pat's dlq list: %+v, %v; want none", dlqs, err)
	}
	var sts []redrive.Status
	if err := signedCall(ctx, nc, users["pat"], time.Time{}, redrive.SubjList, redrive.ListFilter{Scope: "harbor"}, &sts); err != nil || len(sts) != 0 {
		t.Errorf("pat's redrive list: %d requests, %v; want none", len(sts), err)
	}
	var hist []redrive.AuditRecord
	if err := signedCall(ctx, nc, users["pat"], time.Time{}, redrive.SubjHistory, redrive.HistoryFilter{Scope: "harbor"}, &hist); err != nil || len(hist) != 0 {
		t.Errorf("pat's redrive history: %d records, %v; want none", len(hist), err)
	}
	attempts := []struct {
		name    string
		who     string
		subject string
		body    any
		want    string
	}{
		{"pat dlq entries", "pat", redrive.SubjDLQEntries, redrive.EntryFilter{Scope: "harbor", DLQ: "payments"}, "may not see the DLQ of payments"},
		{"pat dlq entries by stream", "pat", redrive.SubjDLQEntries, redrive.EntryFilter{Scope: "harbor", DLQ: "stored_payments_dlq"}, "may not see the DLQ of payments"},
		{"pat dlq show", "pat", redrive.SubjDLQShow, redrive.ShowRequest{Scope: "harbor", DLQ: "payments", Seq: 1}, "may not see the DLQ of payments"},
		{"pat dlq groups", "pat", redrive.SubjDLQGroups, redrive.EntryFilter{Scope: "harbor", DLQ: "payments"}, "may not see the DLQ of payments"},
		{"pat preview", "pat", redrive.SubjPreview, req("", 1), "may not see the DLQ of payments"},
		{"pat request", "pat", redrive.SubjRequest, req("", 1), "may not see the DLQ of payments"},
		{"pat status", "pat", redrive.SubjStatus, redrive.IDRequest{Scope: "harbor", ID: filed.ID}, "may neither see nor act on it"},
		{"pat dry run", "pat", redrive.SubjDryRun, redrive.IDRequest{Scope: "harbor", ID: filed.ID}, "may neither see nor act on it"},
		{"pat approve", "pat", redrive.SubjApprove, redrive.Action{Scope: "harbor", ID: filed.ID}, "may neither see nor act on it"},
		{"pat run", "pat", redrive.SubjRun, redrive.Action{Scope: "harbor", ID: filed.ID}, "may neither see nor act on it"},
		{"pat cancel", "pat", redrive.SubjCancel, redrive.Action{Scope: "harbor", ID: filed.ID}, "may neither see nor act on it"},
		{"sue approve (refunds only)", "sue", redrive.SubjApprove, redrive.Action{Scope: "harbor", ID: filed.ID}, "may neither see nor act on it"},
		{"sue request of payments", "sue", redrive.SubjRequest, req("", 1), "may not see the DLQ of payments"},
		{"alice into refunds", "alice", redrive.SubjRequest, req("refunds.order:1", 10), "may not publish to destination refunds.order:1"},
		{"alice into stored refunds", "alice", redrive.SubjRequest, req("stored.refunds.order:1", 10), "may not publish to destination refunds.order:1"},
		{"alice into the JetStream API", "alice", redrive.SubjRequest, req("$JS.API.STREAM.PURGE.stored_refunds", 10), "may not publish to destination"},
		{"alice preview into refunds", "alice", redrive.SubjPreview, req("refunds.order:1", 10), "may not publish to destination"},
		{"alice above the quota", "alice", redrive.SubjRequest, req("", 1000), "publish-rate quota of 50 events/s"},
		{"alice approving her own", "alice", redrive.SubjApprove, redrive.Action{Scope: "harbor", ID: filed.ID}, "someone else"},
		{"bob into payments (cannot publish)", "bob", redrive.SubjRequest, req("", 10), "may not publish to topic payments"},
	}
	for _, a := range attempts {
		err := signedCall(ctx, nc, users[a.who], time.Time{}, a.subject, a.body, nil)
		switch {
		case err == nil:
			t.Errorf("%s: accepted", a.name)
		case !strings.Contains(err.Error(), a.want):
			t.Errorf("%s: %v, want a refusal containing %q", a.name, err, a.want)
		case strings.Contains(err.Error(), card):
			t.Errorf("%s: the refusal leaks the entry: %v", a.name, err)
		case !errors.Is(err, control.ErrConflict) && !errors.Is(err, control.ErrInvalid):
			t.Errorf("%s: %v, want 409 or 400", a.name, err)
		}
	}
	if n := count(); n != before {
		t.Fatalf("harbor holds %d requests after the refused attempts, want %d", n, before)
	}
	var st redrive.Status
	if err := control.Call(ctx, nc, redrive.SubjStatus, redrive.IDRequest{Scope: "harbor", ID: filed.ID}, &st); err != nil || st.State != redrive.StateRequested || st.ApprovedBy != "" {
		t.Fatalf("alice's request after the attempts: %s approved by %q, %v; want requested", st.State, st.ApprovedBy, err)
	}
	// bob may see the entries: he approves; he may not publish to
	// payments, so alice runs it.
	if err := signedCall(ctx, nc, users["bob"], time.Time{}, redrive.SubjApprove, redrive.Action{Scope: "harbor", ID: filed.ID}, nil); err != nil {
		t.Fatalf("bob's approval: %v", err)
	}
	if err := signedCall(ctx, nc, users["bob"], time.Time{}, redrive.SubjRun, redrive.Action{Scope: "harbor", ID: filed.ID}, nil); err == nil || !strings.Contains(err.Error(), "may not publish to topic payments") {
		t.Fatalf("bob running a redrive into payments: %v, want a refusal", err)
	}
	// A tenant user's unlimited request is given the quota.
	var capped redrive.Status
	if err := signedCall(ctx, nc, users["alice"], time.Time{}, redrive.SubjRequest, req("", 0), &capped); err != nil || capped.Request.Rate != 50 {
		t.Fatalf("alice's unlimited request: rate %g, %v; want 50", capped.Request.Rate, err)
	}
	// The admin credentials (unsigned) still see everything.
	if err := control.Call(ctx, nc, redrive.SubjDLQList, redrive.ScopeRequest{Scope: "harbor"}, &dlqs); err != nil || len(dlqs) != 2 {
		t.Fatalf("unsigned dlq list: %d DLQs, %v; want payments and refunds", len(dlqs), err)
	}
	attack.Refused(t, "control_redrive")
}
