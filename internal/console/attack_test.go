package console_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/attack"
	"github.com/msgplatform/platform/internal/console"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/redrive"
	"github.com/msgplatform/platform/redrive/redrivetest"
	"github.com/msgplatform/platform/tenancy"
)

// card is the card-number-like string the ledger group's DLQ entries
// carry: no response to a user who may not consume them may contain it.
const card = "4111111111111111"

// authz is a tenant harbor (publish-rate quota 50/s) with topics payments
// (review: required; groups ledger and fraud) and refunds, DLQ entries of
// both (payments: 3 of ledger carrying card numbers, 2 of fraud), and
// users with narrow permissions:
//
//	pat   --pub payments                 (publish only)
//	sue   --sub refunds --pub refunds    (another topic)
//	fay   --sub fraud --pub payments     (one group of payments)
//	alice --sub payments --pub payments
//	bob   --sub payments
type authz struct {
	*fixture
	svc *redrive.Service
	// filed is a request of every payments entry, filed by alice.
	filed redrive.Status
}

func startAuthz(t *testing.T) *authz {
	t.Helper()
	f := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	m := f.D.Tenants()
	spec := tenancy.DefaultSpec("harbor")
	spec.Quota.PublishRate = 50
	if _, err := m.Create(ctx, "test", spec); err != nil {
		t.Fatal(err)
	}
	for _, topic := range []string{"payments", "refunds"} {
		ts := platform.DefaultTopicSpec(topic)
		ts.Replicas, ts.Owner = 1, topic+"-team"
		if topic == "payments" {
			ts.Review = platform.ReviewRequired
		}
		if _, err := m.ApplyTopic(ctx, "test", "harbor", ts, catalog.ApplyOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, g := range []string{"ledger", "fraud"} {
		if _, err := m.ApplyGroup(ctx, "test", "harbor", platform.GroupSpec{Name: g, Topic: "payments"}, catalog.ApplyOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, u := range []tenancy.UserSpec{
		{Name: "pat", Pub: []string{"payments"}},
		{Name: "sue", Sub: []string{"refunds"}, Pub: []string{"refunds"}},
		{Name: "fay", Sub: []string{"fraud"}, Pub: []string{"payments"}},
		{Name: "alice", Sub: []string{"payments"}, Pub: []string{"payments"}},
		{Name: "bob", Sub: []string{"payments"}},
	} {
		uc, err := m.AddUser(ctx, "test", "harbor", u)
		if err != nil {
			t.Fatal(err)
		}
		f.Creds[u.Name+"@harbor"] = string(uc.Creds)
	}
	nc, err := f.D.ConnectTenant(ctx, "harbor", "test-harbor")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	redrivetest.DeadLetter(t, js, tenancy.StoredName("payments"), "ledger", 0, 3, "card "+card+" declined (%d)")
	redrivetest.DeadLetter(t, js, tenancy.StoredName("payments"), "fraud", 3, 2, "velocity check %d")
	redrivetest.DeadLetter(t, js, tenancy.StoredName("refunds"), "refunder", 0, 1, "refund %d stuck")
	svc, err := f.D.RedriveFor(ctx, "harbor")
	if err != nil {
		t.Fatal(err)
	}
	st, err := svc.Submit(ctx, redrive.Request{DLQ: "payments", Selection: redrive.Selection{All: true}, Rate: 10, Reason: "filed by alice", Requester: "alice@harbor", Authenticated: true})
	if err != nil {
		t.Fatal(err)
	}
	return &authz{fixture: f, svc: svc, filed: st}
}

// requests is the number of redrive requests in harbor's store.
func (a *authz) requests(t *testing.T) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := a.svc.List(ctx, redrive.ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	return len(l)
}

// unchanged asserts harbor's requests and DLQs are as startAuthz left them
// (plus extra requests filed by legitimate users).
func (a *authz) unchanged(t *testing.T, requests int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if n := a.requests(t); n != requests {
		t.Errorf("harbor holds %d redrive requests, want %d: a refused attempt filed one", n, requests)
	}
	st, err := a.svc.Get(ctx, a.filed.ID)
	if err != nil || st.State != redrive.StateRequested || st.ApprovedBy != "" || st.Progress.Sent != 0 {
		t.Errorf("alice's request after the attempts: %+v, %v; want requested, unapproved, nothing sent", st.State, err)
	}
	d, err := a.svc.DescribeDLQ(ctx, "payments")
	if err != nil || d.Depth != 5 {
		t.Errorf("payments DLQ depth %d, %v; want 5", d.Depth, err)
	}
}

// submit files form through c as a redrive request, wanting the redirect
// to it (what names the request in a failure), and returns the request as
// harbor's store holds it.
func (a *authz) submit(t *testing.T, c *client, what string, form url.Values) (redrive.Status, error) {
	t.Helper()
	code, _, h := c.post("/console/requests", form)
	if code != http.StatusSeeOther {
		t.Fatalf("%s: %d", what, code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return a.svc.Get(ctx, mustURL(h.Get("Location")).Query().Get("id"))
}

// noLeak fails when body holds a ledger entry's reason or any payload.
func noLeak(t *testing.T, what, body string) {
	t.Helper()
	for _, s := range []string{card, `order&#34;:`, `"order":`} {
		if strings.Contains(body, s) {
			t.Errorf("%s leaks %q:\n%s", what, s, excerpt(body))
		}
	}
}

// forbidden GETs each of paths through c and wants a 403 that leaks
// nothing (noLeak).
func forbidden(t *testing.T, c *client, paths ...string) {
	t.Helper()
	for _, p := range paths {
		code, body := c.get(p)
		noLeak(t, "GET "+p, body)
		if code != http.StatusForbidden {
			t.Errorf("GET %s: %d, want 403:\n%s", p, code, excerpt(body))
		}
	}
}

// A publish-only user (--pub payments) sees nothing of the payments DLQ on
// any page or JSON endpoint, and can neither file nor act on a redrive.
func TestAttackConsoleDLQPublishOnly(t *testing.T) {
	a := startAuthz(t)
	c := a.signedIn(t, "pat@harbor")
	before := a.requests(t)
	for _, p := range []string{
		"/console/", "/console/?scope=harbor", "/console/requests", "/console/requests?dlq=payments", "/console/history",
		"/console/history?id=" + a.filed.ID,
	} {
		code, body := c.get(p)
		noLeak(t, "GET "+p, body)
		if strings.Contains(body, ">payments<") || strings.Contains(body, a.filed.ID) && code < 400 {
			t.Errorf("GET %s (%d) lists the payments DLQ or its request:\n%s", p, code, excerpt(body))
		}
	}
	forbidden(t, c,
		"/console/dlq?name=payments", "/console/dlq?name=stored_payments_dlq", "/console/dlq?name=stored.payments",
		"/console/dlq?name=payments&fingerprint=x", "/console/entry?dlq=payments&seq=1", "/console/entry?dlq=stored_payments_dlq&seq=2",
		"/console/groups?dlq=payments", "/console/request?id="+a.filed.ID, "/console/api/status?id="+a.filed.ID,
	)
	for _, form := range []url.Values{
		{"dlq": {"payments"}, "mode": {"all"}, "rate": {"1"}, "reason": {"steal"}},
		{"dlq": {"stored_payments_dlq"}, "mode": {"seqs"}, "seqs": {"1"}, "rate": {"1"}, "reason": {"steal"}},
		{"dlq": {"payments"}, "mode": {"all"}, "rate": {"1"}, "reason": {"steal"}, "destination": {"payments.order:1"}},
	} {
		code, body, _ := c.post("/console/requests", form)
		noLeak(t, "POST /console/requests", body)
		if code != http.StatusForbidden || !strings.Contains(body, "may not see the DLQ of payments") {
			t.Errorf("POST /console/requests %s: %d, want 403 saying why:\n%s", form.Encode(), code, excerpt(body))
		}
	}
	for _, op := range []string{"approve", "run", "reject", "cancel", "pause", "resume"} {
		code, body, _ := c.post("/console/action", url.Values{"id": {a.filed.ID}, "op": {op}})
		noLeak(t, "POST action "+op, body)
		if code != http.StatusForbidden {
			t.Errorf("POST action %s: %d, want 403:\n%s", op, code, excerpt(body))
		}
	}
	a.unchanged(t, before)
	attack.Refused(t, "console_dlq_publish_only")
}

// A user with --sub refunds sees the refunds DLQ and nothing of the
// payments DLQ, in the same tenant.
func TestAttackConsoleDLQOtherTopic(t *testing.T) {
	a := startAuthz(t)
	c := a.signedIn(t, "sue@harbor")
	before := a.requests(t)
	if code, body := c.get("/console/"); code != http.StatusOK || !strings.Contains(body, ">refunds<") || strings.Contains(body, ">payments<") {
		t.Fatalf("sue's DLQ list (%d) must show refunds only:\n%s", code, excerpt(body))
	}
	if code, body := c.get("/console/entry?dlq=refunds&seq=1"); code != http.StatusOK || !strings.Contains(body, "refund 0 stuck") {
		t.Fatalf("sue's own DLQ entry: %d\n%s", code, excerpt(body))
	}
	forbidden(t, c, "/console/dlq?name=payments", "/console/entry?dlq=payments&seq=1", "/console/groups?dlq=payments",
		"/console/request?id="+a.filed.ID, "/console/api/status?id="+a.filed.ID)
	for _, p := range []string{"/console/requests", "/console/history"} {
		_, body := c.get(p)
		noLeak(t, "GET "+p, body)
		if strings.Contains(body, a.filed.ID) {
			t.Errorf("GET %s shows the payments request %s", p, a.filed.ID)
		}
	}
	a.unchanged(t, before)
	attack.Refused(t, "console_dlq_other_topic")
}

// A user who may consume one group of payments (fraud) sees that group's
// entries only, files redrives of those only, and cannot see a request
// that holds another group's entries.
func TestAttackConsoleDLQOtherGroup(t *testing.T) {
	a := startAuthz(t)
	c := a.signedIn(t, "fay@harbor")
	code, body := c.get("/console/dlq?name=payments")
	if code != http.StatusOK || !strings.Contains(body, "velocity check 3") {
		t.Fatalf("fay's view of payments: %d\n%s", code, excerpt(body))
	}
	noLeak(t, "GET /console/dlq?name=payments", body)
	_, body = c.get("/console/groups?dlq=payments")
	noLeak(t, "GET /console/groups", body)
	for _, seq := range []string{"1", "2", "3"} { // the ledger's entries
		code, body := c.get("/console/entry?dlq=payments&seq=" + seq)
		noLeak(t, "GET entry "+seq, body)
		if code != http.StatusForbidden {
			t.Errorf("GET ledger entry %s: %d, want 403", seq, code)
		}
	}
	if code, _ := c.get("/console/request?id=" + a.filed.ID); code != http.StatusForbidden {
		t.Errorf("GET a request holding the ledger's entries: %d, want 403", code)
	}
	if code, body, _ := c.post("/console/action", url.Values{"id": {a.filed.ID}, "op": {"approve"}}); code != http.StatusForbidden {
		t.Errorf("fay approving a request holding entries she may not see: %d, want 403\n%s", code, excerpt(body))
	}
	before := a.requests(t)
	code, body, _ = c.post("/console/requests", url.Values{"dlq": {"payments"}, "mode": {"seqs"}, "seqs": {"1,4"}, "rate": {"1"}, "reason": {"x"}})
	if code != http.StatusForbidden || !strings.Contains(body, "another group dead-lettered it") {
		t.Errorf("fay naming a ledger entry: %d, want 403:\n%s", code, excerpt(body))
	}
	a.unchanged(t, before)
	// "all" is narrowed to the entries she may see.
	st, err := a.submit(t, c, "fay's own redrive request", url.Values{"dlq": {"payments"}, "mode": {"all"}, "rate": {"0"}, "reason": {"fraud rule fixed"}})
	if err != nil || st.Total != 2 || st.Requester != "fay@harbor" || st.Request.Rate != 50 || strings.Join(st.ConsumerGroups, ",") != "fraud" {
		t.Fatalf("fay's request: total %d, requester %s, rate %g, groups %v, %v; want 2 fraud entries at the tenant's 50/s", st.Total, st.Requester, st.Request.Rate, st.ConsumerGroups, err)
	}
	attack.Refused(t, "console_dlq_other_group")
}

// A redrive into a destination the user may not publish to is refused and
// nothing is filed; a rate above the tenant's quota is refused, and no
// rate is given the quota.
func TestAttackConsoleRedriveDestination(t *testing.T) {
	a := startAuthz(t)
	c := a.signedIn(t, "alice@harbor")
	before := a.requests(t)
	for _, dest := range []string{"refunds.order:1", "stored.refunds.order:1", "payments.order:1.x", "$JS.API.STREAM.DELETE.stored_refunds", "other.subject"} {
		code, body, _ := c.post("/console/requests", url.Values{"dlq": {"payments"}, "mode": {"all"}, "rate": {"10"}, "reason": {"x"}, "destination": {dest}})
		if code != http.StatusForbidden && code != http.StatusBadRequest {
			t.Errorf("redrive into %s: %d, want 403:\n%s", dest, code, excerpt(body))
		}
		if code == http.StatusForbidden && !strings.Contains(body, "may not publish to destination") {
			t.Errorf("redrive into %s: refused without saying why:\n%s", dest, excerpt(body))
		}
	}
	// bob may consume payments but publish nowhere: not even back into it.
	b := a.signedIn(t, "bob@harbor")
	if code, body, _ := b.post("/console/requests", url.Values{"dlq": {"payments"}, "mode": {"all"}, "rate": {"10"}, "reason": {"x"}}); code != http.StatusForbidden || !strings.Contains(body, "may not publish to topic payments") {
		t.Errorf("bob redriving into payments: %d, want 403:\n%s", code, excerpt(body))
	}
	// nor run alice's (approved by nobody yet, but the run is refused
	// for the destination first).
	if code, body, _ := b.post("/console/action", url.Values{"id": {a.filed.ID}, "op": {"run"}}); code != http.StatusForbidden {
		t.Errorf("bob running a redrive into payments: %d, want 403:\n%s", code, excerpt(body))
	}
	code, body, _ := c.post("/console/requests", url.Values{"dlq": {"payments"}, "mode": {"all"}, "rate": {"1000"}, "reason": {"x"}})
	if code != http.StatusBadRequest || !strings.Contains(body, "publish-rate quota of 50 events/s") {
		t.Errorf("rate above the quota: %d, want 400 naming the quota:\n%s", code, excerpt(body))
	}
	a.unchanged(t, before)
	if st, err := a.submit(t, c, "alice's unlimited request", url.Values{"dlq": {"payments"}, "mode": {"all"}, "rate": {"0"}, "reason": {"x"}}); err != nil || st.Request.Rate != 50 {
		t.Fatalf("an unlimited request by a tenant user: rate %g, %v; want the quota, 50", st.Request.Rate, err)
	}
	attack.Refused(t, "console_redrive_destination")
}

// The approver of a review: required redrive is another person who may
// see its entries: not the requester, not a publish-only user, not a
// user of one group only.
func TestAttackConsoleApprover(t *testing.T) {
	a := startAuthz(t)
	for _, who := range []string{"pat", "fay", "sue", "alice"} {
		c := a.signedIn(t, who+"@harbor")
		code, body, _ := c.post("/console/action", url.Values{"id": {a.filed.ID}, "op": {"approve"}})
		noLeak(t, who+" approving", body)
		if code != http.StatusForbidden {
			t.Errorf("%s approving alice's request: %d, want 403:\n%s", who, code, excerpt(body))
		}
	}
	a.unchanged(t, a.requests(t))
	b := a.signedIn(t, "bob@harbor")
	if code, body, _ := b.post("/console/action", url.Values{"id": {a.filed.ID}, "op": {"approve"}}); code != http.StatusSeeOther {
		t.Fatalf("bob approving: %d\n%s", code, excerpt(body))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if st, err := a.svc.Get(ctx, a.filed.ID); err != nil || st.ApprovedBy != "bob@harbor" {
		t.Fatalf("after bob's approval: %+v, %v", st.ApprovedBy, err)
	}
	attack.Refused(t, "console_approver")
}

// An unauthenticated 50 MB multipart upload to /console/login is refused
// early (413), spools nothing to the temp dir, and the handler reads at
// most MaxLoginBytes of it.
func TestAttackConsoleLogin(t *testing.T) {
	f := start(t)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	const size = 50 << 20
	for _, chunked := range []bool{false, true} {
		pr, pw := io.Pipe()
		mw := multipart.NewWriter(pw)
		go func() {
			part, err := mw.CreateFormFile("credsfile", "big.creds")
			if err != nil {
				pw.CloseWithError(err)
				return
			}
			chunk := make([]byte, 1<<20)
			for i := range chunk {
				chunk[i] = 'A'
			}
			for i := 0; i < size/len(chunk); i++ {
				if _, err := part.Write(chunk); err != nil {
					pw.CloseWithError(err)
					return
				}
			}
			_ = mw.Close()
			_ = pw.Close()
		}()
		req, _ := http.NewRequest(http.MethodPost, f.Base+"/console/login", pr)
		req.Header.Set("Content-Type", mw.FormDataContentType())
		if !chunked {
			req.ContentLength = size + 1024
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			// The server may close the connection while the body is still
			// being written; what matters is what it spooled.
			t.Logf("upload (chunked %v): %v", chunked, err)
		} else {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestEntityTooLarge && resp.StatusCode != http.StatusBadRequest {
				t.Errorf("50 MB upload (chunked %v): %d, want 413", chunked, resp.StatusCode)
			}
		}
		_ = pr.Close()
		ents, _ := os.ReadDir(tmp)
		if len(ents) != 0 {
			t.Errorf("the upload (chunked %v) left %d files in the temp dir: %v", chunked, len(ents), ents[0].Name())
		}
	}

	// In the handler: it reads at most the limit.
	c, err := console.New(console.Config{URL: f.D.URL(), AdminAccount: f.D.Trust().AdminAccount(),
		Tenants: f.D.ConsoleTenants, Redrive: f.D.RedriveFor, Access: f.D.RedriveAccess})
	if err != nil {
		t.Fatal(err)
	}
	body := &counting{left: size}
	var hdr strings.Builder
	mw := multipart.NewWriter(&hdr)
	_, _ = mw.CreateFormFile("credsfile", "big.creds")
	req := httptest.NewRequest(http.MethodPost, "/console/login", io.MultiReader(strings.NewReader(hdr.String()), body))
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.ContentLength = -1
	rec := httptest.NewRecorder()
	c.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(rec.Body.String(), fmt.Sprintf("larger than %d bytes", console.MaxLoginBytes)) {
		t.Errorf("handler: %d, want 413 saying the limit:\n%s", rec.Code, excerpt(rec.Body.String()))
	}
	if read := size - body.left; read > console.MaxLoginBytes {
		t.Errorf("the login handler read %d bytes of the upload, want at most %d", read, console.MaxLoginBytes)
	}
	if cookies := rec.Result().Cookies(); len(cookies) != 0 {
		t.Errorf("a refused upload set cookies: %v", cookies)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("the handler left %d files in the temp dir", len(ents))
	}
	// Every other route, with and without a method that has a form: a
	// GET's form is read from a multipart body too.
	for _, rt := range []struct {
		method, path string
		limit        int
	}{
		{http.MethodGet, "/console/login?next=/console/", console.MaxLoginBytes},
		{http.MethodGet, "/console/", console.MaxFormBytes},
		{http.MethodPost, "/console/requests", console.MaxFormBytes},
		{http.MethodPost, "/console/logout", console.MaxFormBytes},
		{http.MethodGet, "/console/static/console.js", console.MaxFormBytes},
	} {
		body := &counting{left: size}
		req := httptest.NewRequest(rt.method, rt.path, io.MultiReader(strings.NewReader(hdr.String()), body))
		req.Header.Set("Content-Type", mw.FormDataContentType())
		req.ContentLength = -1
		rec := httptest.NewRecorder()
		c.Handler().ServeHTTP(rec, req)
		if read := size - body.left; read > rt.limit {
			t.Errorf("%s %s read %d bytes of a 50 MB body, want at most %d", rt.method, rt.path, read, rt.limit)
		}
		if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
			t.Errorf("%s %s left %d files in the temp dir", rt.method, rt.path, len(ents))
		}
	}
	attack.Refused(t, "console_login")
}

// counting is left bytes of 'A'.
type counting struct{ left int }

func (c *counting) Read(p []byte) (int, error) {
	if c.left == 0 {
		return 0, io.EOF
	}
	n := min(len(p), c.left)
	for i := range p[:n] {
		p[i] = 'A'
	}
	c.left -= n
	return n, nil
}

// Over TLS the session cookie (and its deletion at logout) is Secure,
// HttpOnly and SameSite=Strict; over plain HTTP it is not Secure.
func TestAttackConsoleCookie(t *testing.T) {
	f := start(t)
	f.TenantTopic(t, "harbor", "payments", false, 1, "alice")
	c, err := console.New(console.Config{URL: f.D.URL(), AdminAccount: f.D.Trust().AdminAccount(),
		Tenants: f.D.ConsoleTenants, Redrive: f.D.RedriveFor, Access: f.D.RedriveAccess})
	if err != nil {
		t.Fatal(err)
	}
	for _, tlsOn := range []bool{true, false} {
		var srv *httptest.Server
		if tlsOn {
			srv = httptest.NewTLSServer(c.Handler())
		} else {
			srv = httptest.NewServer(c.Handler())
		}
		hc := srv.Client()
		hc.Jar, _ = cookiejar.New(nil)
		hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		if tlsOn {
			hc.Transport.(*http.Transport).TLSClientConfig.MinVersion = tls.VersionTLS12
		}
		resp, err := hc.PostForm(srv.URL+"/console/login", url.Values{"creds": {f.Creds["alice@harbor"]}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		cs := resp.Cookies()
		if resp.StatusCode != http.StatusSeeOther || len(cs) != 1 {
			t.Fatalf("login over TLS %v: %d, cookies %v", tlsOn, resp.StatusCode, cs)
		}
		ck := cs[0]
		if ck.Secure != tlsOn || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode {
			t.Errorf("session cookie over TLS %v: Secure %v HttpOnly %v SameSite %v; want Secure %v, HttpOnly, Strict", tlsOn, ck.Secure, ck.HttpOnly, ck.SameSite, tlsOn)
		}
		// Logout clears it with the same attributes.
		resp, err = hc.Get(srv.URL + "/console/")
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		m := csrfRE.FindSubmatch(page)
		if m == nil {
			t.Fatalf("no CSRF token on the DLQ page:\n%s", excerpt(string(page)))
		}
		resp, err = hc.PostForm(srv.URL+"/console/logout", url.Values{"csrf": {string(m[1])}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		for _, ck := range resp.Cookies() {
			if ck.Secure != tlsOn || !ck.HttpOnly {
				t.Errorf("logout cookie over TLS %v: Secure %v HttpOnly %v", tlsOn, ck.Secure, ck.HttpOnly)
			}
		}
		srv.Close()
	}
	attack.Refused(t, "console_cookie")
}

// Permissions are read on every request: a signed-in user whose --sub on
// payments is withdrawn (platformctl user update) sees nothing of it at
// its next click, without signing in again.
func TestAttackConsolePermissionWithdrawn(t *testing.T) {
	a := startAuthz(t)
	c := a.signedIn(t, "alice@harbor")
	if code, body := c.get("/console/entry?dlq=payments&seq=1"); code != http.StatusOK || !strings.Contains(body, card) {
		t.Fatalf("alice before the change: %d\n%s", code, excerpt(body))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := a.D.Tenants().UpdateUser(ctx, "test", "harbor", tenancy.UserSpec{Name: "alice", Pub: []string{"payments"}, Sub: []string{"refunds"}}); err != nil {
		t.Fatal(err)
	}
	before := a.requests(t)
	code, body := c.get("/console/entry?dlq=payments&seq=1")
	noLeak(t, "GET entry after the change", body)
	if code != http.StatusForbidden {
		t.Errorf("alice after her --sub payments was withdrawn: %d, want 403", code)
	}
	if code, _, _ := c.post("/console/requests", url.Values{"dlq": {"payments"}, "mode": {"all"}, "rate": {"1"}, "reason": {"x"}}); code != http.StatusForbidden {
		t.Errorf("alice filing after the change: %d, want 403", code)
	}
	a.unchanged(t, before)
	attack.Refused(t, "console_permission_withdrawn")
}
