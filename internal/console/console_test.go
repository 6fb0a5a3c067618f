package console_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/redrive"
)

// Sign-in: malformed and unknown or revoked credentials get a clear
// error; unauthenticated requests go to the login page (401 for the JSON
// API); a forged cookie is no session; a mutating POST without the CSRF
// token is refused and changes nothing; logout ends the session; the
// platform admin account's user is a platform operator.
func TestConsoleAuth(t *testing.T) {
	f := start(t)
	f.TenantTopic(t, "harbor", "payments", true, 3, "alice", "gone")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := f.D.Tenants().RevokeUser(ctx, "test", "harbor", "gone"); err != nil {
		t.Fatal(err)
	}
	c := f.client(t)

	// Unauthenticated.
	code, _, h := c.do(http.MethodGet, "/console/dlq?name=payments", nil)
	if code != http.StatusSeeOther || !strings.HasPrefix(h.Get("Location"), "/console/login?next=") {
		t.Fatalf("unauthenticated page: %d %q, want a redirect to the login page", code, h.Get("Location"))
	}
	if code, _ := c.get("/console/api/status?id=x"); code != http.StatusUnauthorized {
		t.Fatalf("unauthenticated API: %d, want 401", code)
	}
	if code, _, _ := c.do(http.MethodPost, "/console/requests", url.Values{"dlq": {"payments"}}); code != http.StatusSeeOther {
		t.Fatalf("unauthenticated POST: %d, want a redirect to login", code)
	}

	// Bad credentials, each with a clear message.
	user, _ := nkeys.CreateUser()
	upub, _ := user.PublicKey()
	useed, _ := user.Seed()
	stranger, _ := nkeys.CreateAccount()
	uc := jwt.NewUserClaims(upub)
	uc.Name = "stranger"
	tok, _ := uc.Encode(stranger)
	unknown, _ := jwt.FormatUserConfig(tok, useed)
	for _, tc := range []struct {
		name, creds string
		code        int
		want        string
	}{
		{"empty", "", http.StatusBadRequest, "paste the contents of your .creds file"},
		{"garbage", "hello, I am not a creds file", http.StatusBadRequest, "not a NATS .creds file"},
		{"jwt without seed", strings.Split(f.Creds["alice@harbor"], "*************************")[0], http.StatusBadRequest, "seed is missing or malformed"},
		{"unknown account", string(unknown), http.StatusUnauthorized, "the broker refused these credentials"},
		{"revoked user", f.Creds["gone@harbor"], http.StatusUnauthorized, "the broker refused these credentials"},
	} {
		code, body, _ := c.do(http.MethodPost, "/console/login", url.Values{"creds": {tc.creds}})
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("login with %s creds: %d, want %d with %q; body:\n%s", tc.name, code, tc.code, tc.want, excerpt(body))
		}
	}
	if cookies := c.hc.Jar.Cookies(mustURL(f.Base + "/console/")); len(cookies) != 0 {
		t.Fatalf("a refused login set cookies: %v", cookies)
	}

	// A forged cookie is no session.
	forged := &http.Cookie{Name: "platform_console", Value: "eyJ1IjoiYWRtaW4iLCJvcCI6dHJ1ZSwiZXhwIjo5OTk5OTk5OTk5fQ.AAAA", Path: "/console/"}
	c.hc.Jar.SetCookies(mustURL(f.Base+"/console/"), []*http.Cookie{forged})
	if code, _, h := c.do(http.MethodGet, "/console/", nil); code != http.StatusSeeOther || !strings.HasPrefix(h.Get("Location"), "/console/login") {
		t.Fatalf("forged cookie: %d %q", code, h.Get("Location"))
	}

	// Alice signs in; a POST without the CSRF token changes nothing.
	c.login(f.Creds["alice@harbor"])
	if _, body := c.get("/console/"); !strings.Contains(body, "alice@harbor") || !strings.Contains(body, ">payments<") {
		t.Fatalf("alice's DLQ list:\n%s", excerpt(body))
	}
	form := url.Values{"dlq": {"payments"}, "mode": {"all"}, "rate": {"10"}, "reason": {"no csrf"}}
	code, body, _ := c.do(http.MethodPost, "/console/requests", form)
	if code != http.StatusForbidden || !strings.Contains(body, "CSRF") {
		t.Fatalf("POST without CSRF: %d, want 403 naming the CSRF token:\n%s", code, excerpt(body))
	}
	form.Set("csrf", "AAAA"+c.csrf[4:])
	if code, _, _ := c.do(http.MethodPost, "/console/requests", form); code != http.StatusForbidden {
		t.Fatalf("POST with a wrong CSRF token: %d, want 403", code)
	}
	svc, err := f.D.RedriveFor(ctx, "harbor")
	if err != nil {
		t.Fatal(err)
	}
	if list, err := svc.List(ctx, redrive.ListFilter{}); err != nil || len(list) != 0 {
		t.Fatalf("requests after refused POSTs: %d, %v; want 0", len(list), err)
	}
	// A malformed request form gets a clear error naming the field.
	code, body, _ = c.post("/console/requests", url.Values{"dlq": {"payments"}, "mode": {"range"}, "from_seq": {"x"}, "reason": {"r"}})
	if code != http.StatusBadRequest || !strings.Contains(body, "from_seq") {
		t.Fatalf("malformed form: %d:\n%s", code, excerpt(body))
	}
	// With the token it works, as alice (never a form field).
	form = url.Values{"dlq": {"payments"}, "mode": {"all"}, "rate": {"10"}, "reason": {"with csrf"}, "requester": {"mallory"}}
	code, _, h = c.post("/console/requests", form)
	if code != http.StatusSeeOther || !strings.HasPrefix(h.Get("Location"), "/console/request?id=") {
		t.Fatalf("POST with CSRF: %d %q", code, h.Get("Location"))
	}
	list, err := svc.List(ctx, redrive.ListFilter{})
	if err != nil || len(list) != 1 || list[0].Requester != "alice@harbor" {
		t.Fatalf("requests: %+v, %v; want one by alice@harbor", list, err)
	}
	// The request list offers its actions; cancel from there.
	if _, body := c.get("/console/requests"); !strings.Contains(body, list[0].ID) || !strings.Contains(body, `value="approve"`) || !strings.Contains(body, `value="cancel"`) {
		t.Fatalf("request list:\n%s", excerpt(body))
	}
	if code, _, _ := c.post("/console/action", url.Values{"id": {list[0].ID}, "op": {"cancel"}, "note": {"not needed"}}); code != http.StatusSeeOther {
		t.Fatalf("cancel: %d", code)
	}
	if st, err := svc.Get(ctx, list[0].ID); err != nil || st.State != redrive.StateCancelled || st.Steps[len(st.Steps)-1].Actor != "alice@harbor" {
		t.Fatalf("after cancel: %+v, %v", st.State, err)
	}

	// Logout ends the session, also for a copy of the cookie.
	c.loggedOut("logout")
	if code, _ := c.get("/console/"); code != http.StatusSeeOther {
		t.Fatalf("after logout the old cookie still works: %d", code)
	}

	// The admin account's user is a platform operator: every scope.
	op := f.signedIn(t, "admin@platform")
	if _, body := op.get("/console/"); !strings.Contains(body, "admin@platform") || !strings.Contains(body, "tenant harbor") || !strings.Contains(body, ">orders<") {
		t.Fatalf("operator's page:\n%s", excerpt(body))
	}
	if code, body := op.get("/console/?scope=harbor"); code != http.StatusOK || !strings.Contains(body, ">payments<") {
		t.Fatalf("operator on harbor's scope: %d\n%s", code, excerpt(body))
	}
}

// A tenant cannot see or redrive another tenant's DLQ, neither through
// the console nor through the control API: every attempt is counted and
// none succeeds; the other tenant's DLQ and request are unchanged.
func TestConsoleTenantIsolation(t *testing.T) {
	f := start(t)
	f.TenantTopic(t, "harbor", "payments", true, 4, "alice")
	f.TenantTopic(t, "meridian", "refunds", false, 2, "mallory")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	harbor, err := f.D.RedriveFor(ctx, "harbor")
	if err != nil {
		t.Fatal(err)
	}
	st, err := harbor.Submit(ctx, redrive.Request{DLQ: "payments", Selection: redrive.Selection{All: true}, Rate: 10, Reason: "harbor's own", Requester: "alice@harbor"})
	if err != nil {
		t.Fatal(err)
	}

	m := f.signedIn(t, "mallory@meridian")
	if _, body := m.get("/console/"); !strings.Contains(body, ">refunds<") || strings.Contains(body, "payments") {
		t.Fatalf("mallory's DLQ list must show refunds only:\n%s", excerpt(body))
	}
	attempts, succeeded := 0, 0
	try := func(what string, code int, body string) {
		attempts++
		if code < 400 || strings.Contains(body, "harbor's own") || strings.Contains(body, "card 0 declined") {
			succeeded++
			t.Errorf("mallory %s: %d\n%s", what, code, excerpt(body))
		}
	}
	for _, p := range []string{
		"/console/?scope=harbor",
		"/console/dlq?name=payments",
		"/console/dlq?name=payments&scope=harbor",
		"/console/dlq?name=stored_payments_dlq",
		"/console/entry?dlq=payments&seq=1",
		"/console/entry?dlq=payments&seq=1&scope=harbor",
		"/console/groups?dlq=payments",
		"/console/requests?scope=harbor",
		"/console/request?id=" + st.ID,
		"/console/request?id=" + st.ID + "&scope=harbor",
		"/console/api/status?id=" + st.ID,
		"/console/history?scope=harbor",
	} {
		code, body := m.get(p)
		try("GET "+p, code, body)
	}
	if code, body := m.get("/console/?scope=harbor"); code != http.StatusForbidden || !strings.Contains(body, "cannot see or act on the DLQs of tenant harbor") {
		t.Errorf("cross-scope GET: %d, want 403 with a clear message:\n%s", code, excerpt(body))
	}
	if _, body := m.get("/console/history"); strings.Contains(body, st.ID) {
		t.Errorf("mallory's audit history shows harbor's request %s", st.ID)
	}
	for _, form := range []url.Values{
		{"dlq": {"payments"}, "mode": {"all"}, "rate": {"0"}, "reason": {"steal"}},
		{"dlq": {"payments"}, "mode": {"all"}, "rate": {"0"}, "reason": {"steal"}, "scope": {"harbor"}},
		{"dlq": {"refunds"}, "mode": {"all"}, "rate": {"0"}, "reason": {"x"}, "destination": {"payments.order:1"}},
	} {
		code, body, _ := m.post("/console/requests", form)
		if form.Get("destination") != "" {
			// Allowed or not, it may only ever reach meridian's own
			// account: there is no stream there for payments.*.
			attempts++
			if code < 400 {
				succeeded++
				t.Errorf("redrive into another tenant's subject accepted: %d", code)
			}
			continue
		}
		try("POST /console/requests "+form.Encode(), code, body)
	}
	for _, op := range []string{"approve", "run", "reject", "cancel"} {
		for _, scope := range []string{"", "harbor"} {
			code, body, _ := m.post("/console/action", url.Values{"id": {st.ID}, "op": {op}, "scope": {scope}})
			try("POST action "+op+" scope "+scope, code, body)
		}
	}

	// The control API is served in the PLATFORM account only: a tenant
	// user cannot reach it at all.
	nc := tenantConn(t, f, "mallory@meridian")
	for _, subj := range []string{redrive.SubjDLQList, redrive.SubjDLQEntries, redrive.SubjApprove, redrive.SubjRun, redrive.SubjRequest} {
		attempts++
		cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
		err := control.Call(cctx, nc, subj, redrive.ScopeRequest{Scope: "harbor"}, nil)
		ccancel()
		if err == nil {
			succeeded++
			t.Errorf("tenant user called control %s", subj)
		}
	}
	// An operator scoped to meridian does not see harbor's DLQ either.
	admin, err := f.D.RedriveFor(ctx, "meridian")
	if err != nil {
		t.Fatal(err)
	}
	attempts++
	if _, err := admin.Show(ctx, "payments", 1); !errors.Is(err, redrive.ErrNotFound) {
		succeeded++
		t.Errorf("meridian scope shows harbor's entry: %v", err)
	}

	t.Logf("cross-tenant attempts %d, succeeded %d", attempts, succeeded)
	if succeeded != 0 || attempts < 25 {
		t.Fatalf("cross-tenant attempts %d, succeeded %d; want 0 succeeded", attempts, succeeded)
	}
	got, err := harbor.Get(ctx, st.ID)
	if err != nil || got.State != redrive.StateRequested || got.ApprovedBy != "" {
		t.Fatalf("harbor's request after the attempts: %+v, %v", got.State, err)
	}
	d, err := harbor.DescribeDLQ(ctx, "payments")
	if err != nil || d.Depth != 4 {
		t.Fatalf("harbor's DLQ after the attempts: depth %d, %v; want 4", d.Depth, err)
	}
}

var tagRE = regexp.MustCompile(`(?s)<head>.*?</head>|<[^>]+>`)

// excerpt is a page's text, for failure messages.
func excerpt(body string) string {
	s := strings.Join(strings.Fields(tagRE.ReplaceAllString(body, " ")), " ")
	if len(s) > 1500 {
		s = s[:1500] + "…"
	}
	return s
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}
