package console_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/console"
	"github.com/msgplatform/platform/internal/daemon"
	"github.com/msgplatform/platform/redrive"
)

// secondConsole serves a console as another platformd of the
// installation does: the installation's session key, a verifier of its
// own, and ended sessions recorded in the installation's KV bucket
// through a NATS connection of its own (returned, so a test can cut it).
// wrap, when not nil, wraps the store (fault injection).
func (f *fixture) secondConsole(t *testing.T, wrap func(console.EndedSessions) console.EndedSessions) (string, *nats.Conn, *console.Console) {
	t.Helper()
	key, err := daemon.ConsoleSessionKey(f.D.Trust())
	if err != nil {
		t.Fatal(err)
	}
	nc := f.D.AdminConn(t, nats.Name("second-console"))
	js := natstest.JetStream(t, nc)
	var ended console.EndedSessions = console.NewKVEndedSessions(js, len(f.D.Nodes()), 0)
	if wrap != nil {
		ended = wrap(ended)
	}
	v, err := f.D.NewVerifier()
	if err != nil {
		t.Fatal(err)
	}
	c, err := console.New(console.Config{
		URL: f.D.URL(), AdminAccount: f.D.Trust().AdminAccount(), SessionKey: key, Verifier: v, Ended: ended,
		Tenants: f.D.ConsoleTenants,
		Redrive: f.D.RedriveFor, Access: f.D.RedriveAccess,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(srv.Close)
	return srv.URL, nc, c
}

// cookies returns the client's session cookie(s), to replay them after
// a logout deleted them from the jar (a copied cookie).
func (c *client) cookies() []*http.Cookie { return c.hc.Jar.Cookies(mustURL(c.base + "/console/")) }

func (c *client) replay(saved []*http.Cookie) {
	c.hc.Jar.SetCookies(mustURL(c.base+"/console/"), saved)
}

// loggedOut signs c out, requiring the redirect to the login page (what
// names the step in a failure), and puts the session's cookies back: c
// then holds a copy of an ended session's cookie. It returns them.
func (c *client) loggedOut(what string) []*http.Cookie {
	c.t.Helper()
	saved := c.cookies()
	if code, _, h := c.post("/console/logout", url.Values{}); code != http.StatusSeeOther || h.Get("Location") != "/console/login" {
		c.t.Fatalf("%s: %d %q, want the login page", what, code, h.Get("Location"))
	}
	c.replay(saved)
	return saved
}

// sessionID decodes the session id from a saved cookie (the test reads
// its own cookie; the console never trusts an unsigned one).
func sessionID(t *testing.T, saved []*http.Cookie) string {
	t.Helper()
	for _, ck := range saved {
		if ck.Name != "platform_console" {
			continue
		}
		payload, _, _ := strings.Cut(ck.Value, ".")
		b, err := base64.RawURLEncoding.DecodeString(payload)
		if err != nil {
			t.Fatal(err)
		}
		var s console.Session
		if err := json.Unmarshal(b, &s); err != nil || s.ID == "" {
			t.Fatalf("session cookie: %v %+v", err, s)
		}
		return s.ID
	}
	t.Fatal("no session cookie")
	return ""
}

// refusedWithin polls the client's current console until the session is
// refused (the login page: 303, and 401 from the JSON API) or d passes;
// it returns how long that took.
func (c *client) refusedWithin(t *testing.T, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		code, _, h := c.do(http.MethodGet, "/console/", nil)
		if code == http.StatusSeeOther && strings.HasPrefix(h.Get("Location"), "/console/login") {
			if code, body := c.get("/console/api/status?id=x"); code != http.StatusUnauthorized {
				t.Fatalf("the ended session's JSON API call: %d %s, want 401", code, body)
			}
			return time.Since(start)
		}
		if code != http.StatusOK {
			t.Fatalf("waiting for the ended session to be refused: %d", code)
		}
		if time.Since(start) > d {
			t.Fatalf("the ended session is still accepted on %s after %s", c.base, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Logout is installation-wide, on a 3-node fabric with a second console
// (another platformd of the installation: same session key, its own
// connection and verifier): alice logs in on A, her cookie works on B;
// she logs out on A and a copy of the cookie is refused by B's next
// request (the login page; 401 from the JSON API); the same the other way
// round for bob. A user signed out because their tenant was suspended
// stays signed out everywhere after the tenant is resumed. The record is
// in the KV bucket with the installation's replicas and the session TTL,
// keyed by a hash (no session id in the bucket).
func TestConsoleLogoutAcrossDaemons(t *testing.T) {
	f := startN(t, 3)
	f.TenantTopic(t, "harbor", "payments", false, 2, "alice", "bob", "carol")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := f.Base
	b, ncB, _ := f.secondConsole(t, nil)

	// A → B.
	alice := f.signedIn(t, "alice@harbor")
	alice.base = b
	if code, body := alice.get("/console/"); code != http.StatusOK || !strings.Contains(body, "alice@harbor") {
		t.Fatalf("alice's session on B before the logout: %d\n%s", code, excerpt(body))
	}
	alice.base = a
	aliceID := sessionID(t, alice.loggedOut("logout on A"))
	alice.base = b
	// The ended set is read from its stream's leader: B's very next
	// request sees the record A wrote, not a replica's older state.
	alice.refusedWithin(t, 0)
	alice.base = a
	if code, _, _ := alice.do(http.MethodGet, "/console/", nil); code != http.StatusSeeOther {
		t.Fatalf("alice's ended session on A: %d", code)
	}

	// B → A (the daemon's own console reads the record).
	bob := f.signedInAt(t, b, "bob@harbor")
	bob.loggedOut("logout on B")
	bob.base = a
	bob.refusedWithin(t, 0)

	// Signed out for a suspension on A: still ended on B after the resume.
	carol := f.signedIn(t, "carol@harbor")
	saved := carol.cookies()
	if _, err := f.D.Tenants().Suspend(ctx, "test", "harbor"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1200 * time.Millisecond) // the verifier's cache
	if code, body := carol.get("/console/"); code != http.StatusUnauthorized || !strings.Contains(body, "suspended") {
		t.Fatalf("carol after the suspension: %d, want 401 naming it\n%s", code, excerpt(body))
	}
	if _, err := f.D.Tenants().Resume(ctx, "test", "harbor"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1200 * time.Millisecond)
	carol.replay(saved)
	carol.base = b
	if code, _, h := carol.do(http.MethodGet, "/console/", nil); code != http.StatusSeeOther || !strings.HasPrefix(h.Get("Location"), "/console/login") {
		t.Fatalf("carol's signed-out session on B after the resume: %d %q, want the login page", code, h.Get("Location"))
	}
	f.signedInAt(t, b, "carol@harbor") // the tenant works again: a new sign-in is fine

	// The record: replicated, the session TTL, leader reads, hashed keys.
	js, _ := jetstream.New(ncB)
	kv, err := js.KeyValue(ctx, console.EndedSessionsBucket)
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	info := st.(*jetstream.KeyValueBucketStatus).StreamInfo()
	if info.Config.Replicas != 3 || st.TTL() != console.DefaultSessionTTL || info.Config.AllowDirect {
		t.Fatalf("bucket %s: replicas %d, TTL %s, direct gets %v; want 3, %s and off", console.EndedSessionsBucket, info.Config.Replicas, st.TTL(), info.Config.AllowDirect, console.DefaultSessionTTL)
	}
	keys, err := kv.Keys(ctx)
	if err != nil || len(keys) != 3 {
		t.Fatalf("bucket keys: %v, %v; want 3 (alice, bob, carol)", keys, err)
	}
	whys := map[string]string{}
	for _, k := range keys {
		if strings.Contains(k, aliceID) {
			t.Fatalf("bucket key %s holds a session id", k)
		}
		e, err := kv.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		var rec console.EndedSession
		if err := json.Unmarshal(e.Value(), &rec); err != nil || rec.Expires.IsZero() {
			t.Fatalf("record %s: %s, %v", k, e.Value(), err)
		}
		whys[rec.Principal] = rec.Why
	}
	if whys["alice@harbor"] != "logout" || whys["bob@harbor"] != "logout" || !strings.Contains(whys["carol@harbor"], "suspended") {
		t.Fatalf("records: %v", whys)
	}
}

// flakyEnded fails End while fail is set (the bucket has no quorum).
type flakyEnded struct {
	console.EndedSessions
	fail atomic.Bool
}

func (e *flakyEnded) End(ctx context.Context, s console.EndedSession) error {
	if e.fail.Load() {
		return errors.New("injected: no quorum")
	}
	return e.EndedSessions.End(ctx, s)
}

// Faults: a console that cannot read the record refuses the session with
// 503 and a message saying why, and keeps the cookie (fail closed), but
// still lets its user log out; a logout whose record cannot be written
// ends the session where it was served at once, and everywhere once the
// retried record is written.
func TestConsoleLogoutFaults(t *testing.T) {
	f := start(t)
	f.TenantTopic(t, "harbor", "payments", false, 1, "alice", "bob")
	a := f.Base

	// Cut off from the bucket: 503, nothing done, the cookie kept.
	b, ncB, _ := f.secondConsole(t, nil)
	alice := f.signedIn(t, "alice@harbor")
	alice.base = b
	if code, _ := alice.get("/console/"); code != http.StatusOK {
		t.Fatalf("alice on B: %d", code)
	}
	ncB.Close()
	code, body, h := alice.do(http.MethodGet, "/console/", nil)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "cannot check whether this session was signed out") {
		t.Fatalf("B without its connection: %d, want 503 saying why\n%s", code, excerpt(body))
	}
	if sc := h.Get("Set-Cookie"); sc != "" {
		t.Fatalf("B cleared a session it could not check: %s", sc)
	}
	code, body, _ = alice.post("/console/requests", url.Values{"dlq": {"payments"}, "mode": {"all"}, "rate": {"0"}, "reason": {"x"}})
	if code != http.StatusServiceUnavailable {
		t.Fatalf("a POST on B without its connection: %d\n%s", code, excerpt(body))
	}
	if code, body := alice.get("/console/api/status?id=x"); code != http.StatusServiceUnavailable || !strings.Contains(body, "cannot check") {
		t.Fatalf("the JSON API on B without its connection: %d %s", code, body)
	}
	alice.base = a
	if code, _ := alice.get("/console/"); code != http.StatusOK {
		t.Fatalf("alice's session on A (not ended): %d", code)
	}
	// A logout on B still ends the session there (the record is retried).
	alice.base = b
	alice.loggedOut("logout on B without its connection")
	if code, _, _ := alice.do(http.MethodGet, "/console/", nil); code != http.StatusSeeOther {
		t.Fatalf("alice's session on B after her logout there: %d, want the login page", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	svc, err := f.D.RedriveFor(ctx, "harbor")
	if err != nil {
		t.Fatal(err)
	}
	if list, err := svc.List(ctx, redrive.ListFilter{}); err != nil || len(list) != 0 {
		t.Fatalf("requests after the refused POST: %d, %v", len(list), err)
	}

	// The record cannot be written at logout: ended on C at once, on A
	// once the retry writes it.
	var flaky *flakyEnded
	c, _, _ := f.secondConsole(t, func(e console.EndedSessions) console.EndedSessions {
		flaky = &flakyEnded{EndedSessions: e}
		flaky.fail.Store(true)
		return flaky
	})
	bob := f.signedInAt(t, c, "bob@harbor")
	bob.loggedOut("logout on C")
	if code, _, _ := bob.do(http.MethodGet, "/console/", nil); code != http.StatusSeeOther {
		t.Fatalf("bob's ended session on C: %d, want the login page", code)
	}
	bob.base = a
	if code, _ := bob.get("/console/"); code != http.StatusOK {
		t.Fatalf("bob on A while the record is not written: %d (the record cannot be there yet)", code)
	}
	flaky.fail.Store(false)
	t.Logf("bob's cookie refused on A %s after the record could be written", bob.refusedWithin(t, 5*time.Second))
}
