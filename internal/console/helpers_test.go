package console_test

import (
	"io"
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

	"github.com/msgplatform/platform/internal/console/consoletest"
)

// fixture is the console's test platformd (consoletest.Fixture), with
// the helpers of these tests.
type fixture struct{ *consoletest.Fixture }

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
	return &client{t: t, base: f.Base, hc: &http.Client{Jar: jar, Timeout: 60 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// signedInAt is a new client of the console at base, signed in with the
// creds of who (e.g. "alice@harbor").
func (f *fixture) signedInAt(t *testing.T, base, who string) *client {
	t.Helper()
	c := f.client(t)
	c.base = base
	c.login(f.Creds[who])
	return c
}

// signedIn is signedInAt the fixture's own console.
func (f *fixture) signedIn(t *testing.T, who string) *client {
	t.Helper()
	return f.signedInAt(t, f.Base, who)
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
	if err := os.WriteFile(p, []byte(f.Creds[who]), 0o600); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(f.D.URL(), nats.UserCredentials(p))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}
