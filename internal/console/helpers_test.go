package console_test

import (
	"io"
	"maps"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/daemon/daemontest"
)

// fixture is a running platformd with tenants, each with a topic whose
// DLQ holds entries, and users whose .creds the tests sign in with.
type fixture struct {
	d     *daemontest.Daemon
	base  string // http://host:port
	creds map[string]string
}

// tenantTopic creates tenant with topic (review: required when review)
// and n DLQ entries, and users; it returns the tenant's JetStream.
func (f *fixture) tenantTopic(t *testing.T, tenant, topic string, review bool, n int, users ...string) jetstream.JetStream {
	t.Helper()
	js, creds := f.d.TenantTopic(t, tenant, topic, review, n, users...)
	maps.Copy(f.creds, creds)
	return js
}

func start(t *testing.T) *fixture {
	t.Helper()
	return startN(t, 1)
}

// client is a browser-like HTTP client: it keeps cookies and does not
// follow redirects, so tests see them.
type client struct {
	t    *testing.T
	base string
	hc   *http.Client
	csrf string
}

func (f *fixture) client(t *testing.T) *client {
	jar, _ := cookiejar.New(nil)
	return &client{t: t, base: f.base, hc: &http.Client{Jar: jar, Timeout: 60 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func (c *client) do(method, path string, form url.Values) (int, string, http.Header) {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, c.base+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if m := csrfRE.FindSubmatch(b); m != nil {
		c.csrf = string(m[1])
	}
	return resp.StatusCode, string(b), resp.Header
}

func (c *client) get(path string) (int, string) {
	code, body, _ := c.do(http.MethodGet, path, nil)
	return code, body
}

// post sends form with the session's CSRF token.
func (c *client) post(path string, form url.Values) (int, string, http.Header) {
	form.Set("csrf", c.csrf)
	return c.do(http.MethodPost, path, form)
}

// login signs in with creds and loads a page to learn the CSRF token.
func (c *client) login(creds string) {
	c.t.Helper()
	code, body, h := c.do(http.MethodPost, "/console/login", url.Values{"creds": {creds}})
	if code != http.StatusSeeOther || h.Get("Location") != "/console/" {
		c.t.Fatalf("login: %d %s", code, body)
	}
	if code, body := c.get("/console/"); code != http.StatusOK {
		c.t.Fatalf("after login: %d %s", code, body)
	}
}

// tenantConn connects with a tenant user's creds.
func tenantConn(t *testing.T, f *fixture, who string) *nats.Conn {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, "u.creds")
	if err := os.WriteFile(p, []byte(f.creds[who]), 0o600); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(f.d.URL(), nats.UserCredentials(p))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}
