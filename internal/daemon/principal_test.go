package daemon_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/daemon/daemontest"
	"github.com/msgplatform/platform/internal/principal"
	"github.com/msgplatform/platform/internal/principal/principaltest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/redrive"
	"github.com/msgplatform/platform/redrive/redrivetest"
	"github.com/msgplatform/platform/tenancy"
)

// signedCall sends req to subject signed by s at ts (time.Now() when
// zero).
func signedCall(ctx context.Context, nc *nats.Conn, s *principal.Signer, ts time.Time, subject string, req, resp any) error {
	env, err := sign(s, ts, subject, req)
	if err != nil {
		return err
	}
	return control.Call(ctx, nc, subject, env, resp)
}

func sign(s *principal.Signer, ts time.Time, subject string, req any) (principal.Envelope, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return principal.Envelope{}, err
	}
	if ts.IsZero() {
		ts = time.Now()
	}
	return s.Sign(control.SubjectPrefix+"."+subject, body, ts)
}

// accepted reports whether err (of the refused attempt name) is nil;
// unless it is a 409 refusal containing want, it fails the test.
func accepted(t *testing.T, name string, err error, want string) bool {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: accepted", name)
		return true
	case !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), want):
		t.Errorf("%s: %v, want a refusal (409) containing %q", name, err, want)
	}
	return false
}

// waitCompleted waits up to within for redrive id to complete having
// sent sent events, reading its status through the control API on nc.
func waitCompleted(t *testing.T, ctx context.Context, nc *nats.Conn, id string, sent int, within time.Duration) {
	t.Helper()
	natstest.WaitFor(t, within, func() error {
		var s redrive.Status
		if err := control.Call(ctx, nc, redrive.SubjStatus, redrive.IDRequest{ID: id}, &s); err != nil {
			return err
		}
		if s.State != redrive.StateCompleted || s.Progress.Sent != sent {
			return errors.New(string(s.State))
		}
		return nil
	})
}

// reviewedPayments applies through the control API on nc the topic
// payments (owner payments-team, review required, replicas replicas)
// and dead-letters 8 of its events from group ledger.
func reviewedPayments(t *testing.T, ctx context.Context, nc *nats.Conn, js jetstream.JetStream, replicas int) {
	t.Helper()
	payments := platform.DefaultTopicSpec("payments")
	payments.Replicas, payments.Owner, payments.Review = replicas, "payments-team", platform.ReviewRequired
	if err := control.Call(ctx, nc, control.SubjTopicApply, control.ApplyTopicRequest{Spec: payments}, nil); err != nil {
		t.Fatal(err)
	}
	redrivetest.DeadLetter(t, js, "payments", "ledger", 0, 8, "card number %d is not a number")
}

func signer(t *testing.T, creds []byte) *principal.Signer {
	t.Helper()
	s, err := principal.NewSigner(creds)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Four eyes through the control API with authenticated principals, on a
// real 3-node fabric: an unsigned request, an unsigned approval, a
// self-approval by the authenticated requester, a forged signature, a
// signature over another body, an expired timestamp and a replayed
// request are each refused with a message saying why, and none changes
// anything; a different authenticated user approves, the requester runs
// it, and it completes. Audit records name the authenticated principals.
func TestSignedRedriveFourEyes(t *testing.T) {
	d, nc, js, ctx := daemontest.StartAdmin(t, 3, 2*time.Minute, nats.Name("principal-test"))
	call := func(subject string, req, resp any) error { return control.Call(ctx, nc, subject, req, resp) }

	reviewedPayments(t, ctx, nc, js, 3)
	alice := signer(t, principaltest.PlatformUser(t, d.Trust(), "alice"))
	bob := signer(t, principaltest.PlatformUser(t, d.Trust(), "bob"))

	requests := func() int {
		var list []redrive.Status
		if err := call(redrive.SubjList, redrive.ListFilter{DLQ: "payments"}, &list); err != nil {
			t.Fatal(err)
		}
		return len(list)
	}
	r := redrive.Request{DLQ: "payments", Selection: redrive.Selection{All: true}, Rate: 500, Reason: "parser fixed", Requester: "mallory"}

	// An unsigned request for a review: required DLQ.
	err := call(redrive.SubjRequest, r, nil)
	if !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), "--user-creds") {
		t.Fatalf("unsigned request on a review: required DLQ: %v, want a refusal saying to pass --user-creds", err)
	}
	// A signed one, then its replay.
	env, err := sign(alice, time.Time{}, redrive.SubjRequest, r)
	if err != nil {
		t.Fatal(err)
	}
	var st redrive.Status
	if err := call(redrive.SubjRequest, env, &st); err != nil {
		t.Fatal(err)
	}
	if st.Requester != "alice@platform" || !st.Authenticated {
		t.Fatalf("requester %q authenticated %v, want alice@platform, true (the signed principal, not the body's %q)", st.Requester, st.Authenticated, r.Requester)
	}
	if err := call(redrive.SubjRequest, env, nil); !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), "replayed") {
		t.Fatalf("replayed request: %v, want a refusal naming the replay", err)
	}
	// Replayed to another platformd of the installation (its own caches,
	// the shared replay record): refused too.
	other, err := d.NewVerifier()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Verify(ctx, control.SubjectPrefix+"."+redrive.SubjRequest, env); !errors.Is(err, principal.ErrUnauthenticated) || !strings.Contains(err.Error(), "another platformd") {
		t.Fatalf("request replayed to a second daemon's verifier: %v, want a refusal naming the replay", err)
	}
	if n := requests(); n != 1 {
		t.Fatalf("%d requests after a replay, want 1", n)
	}

	approve := redrive.Action{ID: st.ID, Actor: "bob", Note: "looks right"}
	forged := func() any { // bob's JWT, signed by someone else's key
		mallory, _ := nkeys.CreateUser()
		e, _ := sign(bob, time.Time{}, redrive.SubjApprove, approve)
		body, _ := json.Marshal(approve)
		sig, _ := mallory.Sign(principal.Message(control.SubjectPrefix+"."+redrive.SubjApprove, e.Auth.Time, e.Auth.Nonce, body))
		e.Auth.Sig = base64.RawURLEncoding.EncodeToString(sig)
		return e
	}
	otherBody := func() any { // signed for a note, sent with another
		e, _ := sign(bob, time.Time{}, redrive.SubjApprove, approve)
		e.Body, _ = json.Marshal(redrive.Action{ID: st.ID, Actor: "bob", Note: "changed on the way"})
		return e
	}
	otherSubject := func() any { // a rejection's signature on an approval
		e, _ := sign(bob, time.Time{}, redrive.SubjReject, approve)
		return e
	}
	stale := func() any {
		e, _ := sign(bob, time.Now().Add(-5*time.Minute), redrive.SubjApprove, approve)
		return e
	}
	selfApprove := func() any {
		e, _ := sign(alice, time.Time{}, redrive.SubjApprove, approve)
		return e
	}
	attempts := []struct {
		name, subject string
		body          func() any
		want          string
	}{
		{"unsigned approval", redrive.SubjApprove, func() any { return approve }, "--user-creds"},
		{"unsigned run", redrive.SubjRun, func() any { return approve }, "--user-creds"},
		{"self-approval by the authenticated requester", redrive.SubjApprove, selfApprove, "someone else"},
		{"forged signature", redrive.SubjApprove, forged, "does not verify"},
		{"signature over another body", redrive.SubjApprove, otherBody, "does not verify"},
		{"signature for another operation", redrive.SubjApprove, otherSubject, "does not verify"},
		{"expired timestamp", redrive.SubjApprove, stale, "from this server's clock"},
	}
	succeeded := 0
	for _, a := range attempts {
		if accepted(t, a.name, call(a.subject, a.body(), nil), a.want) {
			succeeded++
		}
	}
	if succeeded != 0 {
		t.Fatalf("%d of %d refused attempts succeeded", succeeded, len(attempts))
	}
	var cur redrive.Status
	if err := call(redrive.SubjStatus, redrive.IDRequest{ID: st.ID}, &cur); err != nil {
		t.Fatal(err)
	}
	if cur.State != redrive.StateRequested || cur.ApprovedBy != "" || len(cur.Steps) != 1 || cur.Progress.Sent != 0 {
		t.Fatalf("after %d refused attempts: state %s, approved by %q, %d steps, %d sent; want nothing changed", len(attempts), cur.State, cur.ApprovedBy, len(cur.Steps), cur.Progress.Sent)
	}

	// Another authenticated user approves; the requester runs it.
	var ap redrive.Status
	if err := signedCall(ctx, nc, bob, time.Time{}, redrive.SubjApprove, approve, &ap); err != nil {
		t.Fatal(err)
	}
	if ap.ApprovedBy != "bob@platform" {
		t.Fatalf("approved by %q, want bob@platform", ap.ApprovedBy)
	}
	if err := signedCall(ctx, nc, alice, time.Time{}, redrive.SubjRun, redrive.Action{ID: st.ID}, nil); err != nil {
		t.Fatal(err)
	}
	waitCompleted(t, ctx, nc, st.ID, 8, 30*time.Second)
	var hist []redrive.AuditRecord
	if err := call(redrive.SubjHistory, redrive.HistoryFilter{ID: st.ID}, &hist); err != nil {
		t.Fatal(err)
	}
	actors := map[string]string{}
	for _, h := range hist {
		actors[h.Action] = h.Actor
	}
	if actors[redrive.ActionRequest] != "alice@platform" || actors[redrive.ActionApprove] != "bob@platform" || actors[redrive.ActionRun] != "alice@platform" {
		t.Fatalf("audit actors %v, want request and run by alice@platform, approval by bob@platform", actors)
	}
}

// Tenant users sign with the .creds `platformctl user add` writes: they
// act in their tenant's scope only, a revoked user and the users of a
// suspended tenant are refused, and an unsigned request on a DLQ without
// review still works, recorded as unauthenticated:<name>.
func TestSignedRedriveTenants(t *testing.T) {
	d, nc, _, ctx := daemontest.StartAdmin(t, 3, 2*time.Minute, nats.Name("principal-test"))
	call := func(subject string, req, resp any) error { return control.Call(ctx, nc, subject, req, resp) }
	m := d.Tenants()
	users := map[string]*principal.Signer{}
	for _, tn := range []struct {
		name, topic string
		review      bool
		users       []string
	}{{"harbor", "payments", true, []string{"carol", "dave", "eve"}}, {"meridian", "orders", false, []string{"frank"}}} {
		if _, err := m.Create(ctx, "test", tenancy.DefaultSpec(tn.name)); err != nil {
			t.Fatal(err)
		}
		spec := platform.DefaultTopicSpec(tn.topic)
		spec.Replicas, spec.Owner = 1, tn.topic+"-team"
		if tn.review {
			spec.Review = platform.ReviewRequired
		}
		if _, err := m.ApplyTopic(ctx, "test", tn.name, spec, catalog.ApplyOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, u := range tn.users {
			uc, err := m.AddUser(ctx, "test", tn.name, tenancy.UserSpec{Name: u, Pub: []string{tn.topic}, Sub: []string{tn.topic}})
			if err != nil {
				t.Fatal(err)
			}
			users[u] = signer(t, uc.Creds)
		}
		tnc, err := d.ConnectTenant(ctx, tn.name, "test-"+tn.name)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(tnc.Close)
		tjs, _ := jetstream.New(tnc)
		redrivetest.DeadLetter(t, tjs, tenancy.StoredName(tn.topic), "ledger", 0, 4, "card %d declined by the test")
	}
	if _, err := m.RevokeUser(ctx, "test", "harbor", "eve"); err != nil {
		t.Fatal(err)
	}
	req := func(scope, dlq string) redrive.Request {
		return redrive.Request{Scope: scope, DLQ: dlq, Selection: redrive.Selection{All: true}, Reason: "fixed", Requester: "x"}
	}
	var st redrive.Status
	if err := signedCall(ctx, nc, users["carol"], time.Time{}, redrive.SubjRequest, req("harbor", "payments"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Requester != "carol@harbor" {
		t.Fatalf("requester %q, want carol@harbor", st.Requester)
	}
	attempts := []struct {
		name    string
		s       *principal.Signer
		subject string
		body    any
		want    string
	}{
		{"revoked user's request", users["eve"], redrive.SubjRequest, req("harbor", "payments"), "revoked"},
		{"revoked user's approval", users["eve"], redrive.SubjApprove, redrive.Action{Scope: "harbor", ID: st.ID}, "revoked"},
		{"a harbor user on meridian's DLQ", users["carol"], redrive.SubjRequest, req("meridian", "orders"), "cannot act on tenant meridian"},
		{"a meridian user approving harbor's request", users["frank"], redrive.SubjApprove, redrive.Action{Scope: "harbor", ID: st.ID}, "cannot act on tenant harbor"},
		{"a tenant user on the platform account", users["carol"], redrive.SubjRequest, req("", "orders"), "cannot act on the platform admin account"},
		{"a tenant user resetting a platform group", users["carol"], redrive.SubjResetRequest,
			redrive.ResetRequestBody{Reset: catalog.GroupResetRequest{Group: "email-notifier", ToStart: true}, Reason: "x"}, "cannot act on the platform admin account"},
		{"self-approval", users["carol"], redrive.SubjApprove, redrive.Action{Scope: "harbor", ID: st.ID}, "someone else"},
	}
	succeeded := 0
	for _, a := range attempts {
		if accepted(t, a.name, signedCall(ctx, nc, a.s, time.Time{}, a.subject, a.body, nil), a.want) {
			succeeded++
		}
	}
	if succeeded != 0 {
		t.Fatalf("%d of %d refused attempts succeeded", succeeded, len(attempts))
	}
	for scope, want := range map[string]int{"harbor": 1, "meridian": 0} {
		var list []redrive.Status
		if err := call(redrive.SubjList, redrive.ListFilter{Scope: scope}, &list); err != nil {
			t.Fatal(err)
		}
		if len(list) != want || (want == 1 && (list[0].State != redrive.StateRequested || list[0].ApprovedBy != "")) {
			t.Fatalf("tenant %s: requests %+v after refused attempts, want %d untouched", scope, list, want)
		}
	}
	var resets []redrive.ResetRequest
	if err := call(redrive.SubjResetList, struct{}{}, &resets); err != nil || len(resets) != 0 {
		t.Fatalf("reset requests %+v, %v; want none", resets, err)
	}

	// A colleague approves (signed); an unsigned run of a review:
	// required DLQ is refused, a signed one runs.
	if err := signedCall(ctx, nc, users["dave"], time.Time{}, redrive.SubjApprove, redrive.Action{Scope: "harbor", ID: st.ID}, nil); err != nil {
		t.Fatal(err)
	}
	if err := call(redrive.SubjRun, redrive.Action{Scope: "harbor", ID: st.ID, Actor: "carol"}, nil); !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), "--user-creds") {
		t.Fatalf("unsigned run of an approved review: required redrive: %v", err)
	}
	if err := signedCall(ctx, nc, users["carol"], time.Time{}, redrive.SubjRun, redrive.Action{Scope: "harbor", ID: st.ID}, nil); err != nil {
		t.Fatal(err)
	}

	// Without review, unsigned still works and says it was unauthenticated.
	var un redrive.Status
	if err := call(redrive.SubjRequest, redrive.Request{Scope: "meridian", DLQ: "orders", Selection: redrive.Selection{All: true}, Reason: "fixed", Requester: "ops"}, &un); err != nil {
		t.Fatal(err)
	}
	if un.Requester != principal.Unauthenticated+"ops" || un.Authenticated {
		t.Fatalf("unsigned requester %q authenticated %v", un.Requester, un.Authenticated)
	}

	// A suspended tenant's users are refused, once the verifier's cache
	// of frank's last check (CacheTTL, 1 s: the contract in
	// internal/principal/doc.go) has run out; before that a daemon may
	// still accept him, as it did when his check above was under a
	// second old.
	if _, err := m.Suspend(ctx, "test", "meridian"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1200 * time.Millisecond)
	natstest.WaitFor(t, 10*time.Second, func() error {
		err := signedCall(ctx, nc, users["frank"], time.Time{}, redrive.SubjCancel, redrive.Action{Scope: "meridian", ID: un.ID}, nil)
		if err == nil {
			t.Fatal("a suspended tenant's user cancelled a redrive")
		}
		if !strings.Contains(err.Error(), "suspended") {
			return err
		}
		return nil
	})
}
