package console_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/msgplatform/platform/internal/console"
	"github.com/msgplatform/platform/internal/console/consoletest"
	"github.com/msgplatform/platform/internal/daemon"
	"github.com/msgplatform/platform/redrive"
)

func startN(t *testing.T, nodes int) *fixture {
	t.Helper()
	return &fixture{consoletest.Start(t, nodes)}
}

// A credential revoked after sign-in, or a tenant suspended, stops
// working at the next request (within the verifier's one-second cache):
// the user is signed out with a message saying why, and the action they
// posted is not done. Other users of the tenant keep working until the
// tenant is suspended.
func TestConsoleRevokedAfterSignIn(t *testing.T) {
	f := startN(t, 3)
	f.TenantTopic(t, "harbor", "payments", true, 3, "alice", "bob")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	svc, err := f.D.RedriveFor(ctx, "harbor")
	if err != nil {
		t.Fatal(err)
	}
	st, err := svc.Submit(ctx, redrive.Request{DLQ: "payments", Selection: redrive.Selection{All: true}, Reason: "fixed", Requester: "alice@harbor", Authenticated: true})
	if err != nil {
		t.Fatal(err)
	}
	alice, bob := f.client(t), f.client(t)
	alice.login(f.Creds["alice@harbor"])
	bob.login(f.Creds["bob@harbor"])
	if code, body := bob.get("/console/requests"); code != http.StatusOK || !strings.Contains(body, st.ID) {
		t.Fatalf("bob's request list: %d", code)
	}
	if _, err := f.D.Tenants().RevokeUser(ctx, "test", "harbor", "bob"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1200 * time.Millisecond) // the verifier's cache (1s)
	code, body, _ := bob.post("/console/action", url.Values{"id": {st.ID}, "op": {"approve"}, "scope": {"harbor"}})
	if code != http.StatusUnauthorized || !strings.Contains(body, "signed out: bob@harbor no longer checks out") || !strings.Contains(body, "revoked") || !strings.Contains(body, "nothing was done") {
		t.Fatalf("revoked user's approval: %d, want 401 saying he was signed out because he is revoked:\n%s", code, excerpt(body))
	}
	cur, err := svc.Get(ctx, st.ID)
	if err != nil {
		t.Fatal(err)
	}
	if cur.State != redrive.StateRequested || cur.ApprovedBy != "" || len(cur.Steps) != 1 {
		t.Fatalf("after the revoked user's approval: state %s, approved by %q, %d steps; want nothing changed", cur.State, cur.ApprovedBy, len(cur.Steps))
	}
	if code, _, h := bob.do(http.MethodGet, "/console/requests", nil); code != http.StatusSeeOther || !strings.HasPrefix(h.Get("Location"), "/console/login") {
		t.Fatalf("revoked user's next page: %d %q, want the login page (session ended)", code, h.Get("Location"))
	}
	if code, _ := alice.get("/console/requests"); code != http.StatusOK {
		t.Fatalf("alice (not revoked): %d", code)
	}
	if code, _ := alice.get("/console/api/status?scope=harbor&id=" + st.ID); code != http.StatusOK {
		t.Fatalf("alice's status API: %d", code)
	}

	// Suspending the tenant signs its users out.
	if _, err := f.D.Tenants().Suspend(ctx, "test", "harbor"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1200 * time.Millisecond)
	code, body, _ = alice.post("/console/action", url.Values{"id": {st.ID}, "op": {"cancel"}, "scope": {"harbor"}})
	if code != http.StatusUnauthorized || !strings.Contains(body, "suspended") {
		t.Fatalf("suspended tenant's user: %d, want 401 naming the suspension:\n%s", code, excerpt(body))
	}
	if cur, err := svc.Get(ctx, st.ID); err != nil || cur.State != redrive.StateRequested {
		t.Fatalf("after the suspended user's cancel: %+v, %v; want still requested", cur.State, err)
	}
}

// Sessions are signed with a key derived from the installation's trust:
// a console given that key (another platformd of the installation)
// accepts a session the daemon's console issued, with its CSRF token; a
// console of another installation (another key) does not.
func TestConsoleSessionAcrossDaemons(t *testing.T) {
	f := startN(t, 3)
	f.TenantTopic(t, "harbor", "payments", false, 2, "alice")
	key, err := daemon.ConsoleSessionKey(f.D.Trust())
	if err != nil {
		t.Fatal(err)
	}
	other := make([]byte, 32)
	serve := func(key []byte) string {
		c, err := console.New(console.Config{
			URL: f.D.URL(), AdminAccount: f.D.Trust().AdminAccount(), SessionKey: key,
			Tenants: f.D.ConsoleTenants,
			Redrive: f.D.RedriveFor, Access: f.D.RedriveAccess,
		})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(c.Handler())
		t.Cleanup(srv.Close)
		return srv.URL
	}
	second, foreign := serve(key), serve(other)

	c := f.signedIn(t, "alice@harbor") // on the daemon's own console
	c.base = second
	if code, body := c.get("/console/"); code != http.StatusOK || !strings.Contains(body, "alice@harbor") || !strings.Contains(body, "payments") {
		t.Fatalf("the session on a second console of the installation: %d\n%s", code, excerpt(body))
	}
	code, body, h := c.post("/console/requests", url.Values{"dlq": {"payments"}, "mode": {"all"}, "reason": {"from the second console"}, "rate": {"0"}, "sample_size": {"0"}})
	if code != http.StatusSeeOther {
		t.Fatalf("a POST with the session's CSRF token on the second console: %d %q\n%s", code, h.Get("Location"), excerpt(body))
	}
	c.base = foreign
	if code, _, h := c.do(http.MethodGet, "/console/", nil); code != http.StatusSeeOther || !strings.HasPrefix(h.Get("Location"), "/console/login") {
		t.Fatalf("a console of another installation accepted the session: %d %q", code, h.Get("Location"))
	}
}
