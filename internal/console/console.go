package console

import (
	"context"
	"crypto/tls"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/msgplatform/platform/internal/principal"
	"github.com/msgplatform/platform/internal/validate"
	"github.com/msgplatform/platform/redrive"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Prefix is the path the console is served under.
const Prefix = "/console/"

// TenantRef names a tenant and its NATS account.
type TenantRef struct {
	Name    string
	Account string
}

// Config wires the console to the daemon.
type Config struct {
	// URL is the local NATS node(s) (comma-separated) the console
	// connects to with a user's .creds to authenticate them.
	URL string
	// TLS, when the nodes' client port speaks TLS, is the client
	// configuration the console dials them with (the daemon's own).
	TLS *tls.Config
	// AdminAccount is the public key of the PLATFORM account: its users
	// are platform operators.
	AdminAccount string
	// Tenants lists the tenants and their accounts.
	Tenants func(ctx context.Context) ([]TenantRef, error)
	// Redrive returns the redrive service of a scope ("" the platform
	// admin account, else a tenant's).
	Redrive func(ctx context.Context, tenant string) (*redrive.Service, error)
	// Access says what a signed-in user may see and do (redrive.Access:
	// the DLQs of what it may consume, redrives into what it may publish
	// to at most at its tenant's rate quota); every page and action goes
	// through redrive.Service.For with it. platformd: Daemon.RedriveAccess.
	Access func(ctx context.Context, p *principal.Principal) (redrive.Access, error)
	// Verifier re-checks the signed-in user on every request (revoked,
	// expired, tenant suspended, signing key removed; cached per user for
	// about a second) and signs them out when they no longer check out.
	// nil: sessions are checked at sign-in only.
	Verifier *principal.Verifier
	// SessionKey signs the session cookies. Every daemon of an
	// installation given the same key (platformd derives it from the
	// installation's trust) accepts the others' sessions; empty: a key
	// drawn at random per process.
	SessionKey []byte
	// SessionTTL bounds a sign-in (default DefaultSessionTTL), and the
	// user JWT's expiry bounds it too.
	SessionTTL time.Duration
	// Ended records the sessions this console ends (logout, a user signed
	// out) installation-wide and is consulted on every authenticated
	// request, so a session ended on one platformd is refused by all
	// (platformd: KVEndedSessions, a replicated KV bucket). nil: a
	// session ends on this console only.
	Ended  EndedSessions
	Logger *slog.Logger
}

// DefaultSessionTTL is the default Config.SessionTTL.
const DefaultSessionTTL = 8 * time.Hour

// Validate reports every missing piece.
func (c Config) Validate() error {
	var p validate.Problems
	if c.URL == "" {
		p.Addf("url", "name the local NATS node the console authenticates users against")
	}
	if c.AdminAccount == "" {
		p.Addf("admin_account", "name the platform admin account")
	}
	if c.Redrive == nil {
		p.Addf("redrive", "is required")
	}
	if c.Access == nil {
		p.Addf("access", "is required: what each user may see and redrive")
	}
	if n := len(c.SessionKey); n > 0 && n < 32 {
		p.Addf("session_key", "must be at least 32 bytes, got %d", n)
	}
	if c.SessionTTL < 0 {
		p.Addf("session_ttl", "must be >= 0, got %s", c.SessionTTL)
	}
	return p.Err(errors.New("console: invalid config"))
}

// Console serves the web console.
type Console struct {
	cfg   Config
	log   *slog.Logger
	ss    *sessions
	pages map[string]*template.Template
	// handler is the routes with every request body bounded.
	handler http.Handler

	// done ends the retries of end records (endSession); retries counts
	// them.
	done      chan struct{}
	closeOnce sync.Once
	retries   sync.WaitGroup
}

// New builds a console; Handler serves it.
func New(cfg Config) (*Console, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ss, err := newSessions(cfg.SessionKey, cfg.SessionTTL)
	if err != nil {
		return nil, err
	}
	c := &Console{cfg: cfg, log: cfg.Logger, ss: ss, pages: map[string]*template.Template{}, done: make(chan struct{})}
	if err := c.parse(); err != nil {
		return nil, err
	}
	c.routes()
	return c, nil
}

// Handler serves everything under Prefix, every request body bounded
// (MaxLoginBytes, MaxFormBytes).
func (c *Console) Handler() http.Handler { return c.handler }

// Close stops the background retries of end records that failed
// (endSession) and waits for them within ctx. It is idempotent; the
// handler keeps serving.
func (c *Console) Close(ctx context.Context) error {
	c.closeOnce.Do(func() { close(c.done) })
	stopped := make(chan struct{})
	go func() {
		c.retries.Wait()
		close(stopped)
	}()
	select {
	case <-stopped:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("console: close: %w", ctx.Err())
	}
}

var funcs = template.FuncMap{
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return time.Since(t).Round(time.Second).String() + " ago"
	},
	"ts": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"dur": func(d time.Duration) string {
		if d <= 0 {
			return "-"
		}
		return d.Round(time.Second).String()
	},
	"rate": func(r float64) string {
		if r == 0 {
			return "unlimited"
		}
		return fmt.Sprintf("%g/s", r)
	},
	"f1":   func(f float64) string { return fmt.Sprintf("%.1f", f) },
	"join": strings.Join,
	"q":    url.QueryEscape,
}

func (c *Console) parse() error {
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return err
	}
	for _, n := range names {
		base := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if base == "layout" {
			continue
		}
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", n)
		if err != nil {
			return fmt.Errorf("console: template %s: %w", n, err)
		}
		c.pages[base] = t
	}
	return nil
}

func (c *Console) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	m.Handle("GET /console/static/", http.StripPrefix("/console/static/", http.FileServerFS(static)))
	m.HandleFunc("GET /console/login", c.loginPage)
	m.HandleFunc("POST /console/login", c.login)
	m.HandleFunc("POST /console/logout", c.guard(c.logout, true))
	m.HandleFunc("GET /console/{$}", c.authed(c.page(c.dlqs)))
	m.HandleFunc("GET /console/dlq", c.authed(c.page(c.dlq)))
	m.HandleFunc("GET /console/entry", c.authed(c.page(c.entry)))
	m.HandleFunc("GET /console/groups", c.authed(c.page(c.groups)))
	m.HandleFunc("GET /console/requests", c.authed(c.page(c.requests)))
	m.HandleFunc("POST /console/requests", c.authed(c.submit))
	m.HandleFunc("GET /console/request", c.authed(c.page(c.request)))
	m.HandleFunc("POST /console/action", c.authed(c.action))
	m.HandleFunc("GET /console/api/status", c.authed(c.statusJSON))
	m.HandleFunc("GET /console/history", c.authed(c.page(c.history)))
	c.handler = bounded(m)
}

// view is what every page template gets.
type view struct {
	Title   string
	S       *Session
	CSRF    string
	Scope   string
	Error   string
	Notice  string
	Tenants []TenantRef
	Data    any
}

// authed wraps h: no valid session (none, forged, expired, or ended on
// this or, per Config.Ended, another platformd) → the login page (401 for
// the JSON API); a session Config.Ended cannot check → 503, nothing done
// (fail closed); a POST without the session's CSRF token → 403, nothing
// done.
func (c *Console) authed(h func(w http.ResponseWriter, r *http.Request, s Session)) http.HandlerFunc {
	return c.guard(h, false)
}

// guard is authed; ending (the logout handler, which only ends the
// session) proceeds when Config.Ended cannot be read: ending a session
// is safe whether or not it was ended elsewhere.
func (c *Console) guard(h func(w http.ResponseWriter, r *http.Request, s Session), ending bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, ok := c.ss.read(r)
		if ok && c.cfg.Ended != nil {
			ctx, cancel := context.WithTimeout(r.Context(), endedTimeout)
			ended, err := c.cfg.Ended.Ended(ctx, s.ID)
			cancel()
			if err != nil && !ending {
				c.log.Warn("console: cannot check whether a session was ended; request refused", "principal", s.Principal(), "err", err)
				msg := fmt.Sprintf("console: cannot check whether this session was signed out on another platformd of the installation (%v); nothing was done; try again in a moment", err)
				if strings.HasPrefix(r.URL.Path, "/console/api/") {
					http.Error(w, msg, http.StatusServiceUnavailable)
					return
				}
				c.fail(w, r, nil, http.StatusServiceUnavailable, errors.New(msg))
				return
			}
			if ended {
				c.ss.forget(w, r, s) // remembered here: its replays are refused without a lookup
				ok = false
			}
		}
		if !ok {
			if strings.HasPrefix(r.URL.Path, "/console/api/") {
				http.Error(w, "console: sign in first", http.StatusUnauthorized)
				return
			}
			http.Redirect(w, r, "/console/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		if c.cfg.Verifier != nil {
			if err := c.cfg.Verifier.Check(r.Context(), s.principal()); err != nil {
				c.signOut(w, r, s, err)
				return
			}
		}
		if r.Method == http.MethodPost {
			if err := r.ParseMultipartForm(MaxFormBytes); err != nil && !errors.Is(err, http.ErrNotMultipart) {
				c.fail(w, r, &s, formStatus(err), fmt.Errorf("console: cannot read the form: %s; nothing was changed", formError(err, MaxFormBytes)))
				return
			}
			if !c.ss.checkCSRF(s, r.PostFormValue("csrf")) {
				c.fail(w, r, &s, http.StatusForbidden, errors.New("console: refused: this form has no valid CSRF token (reload the page and submit again); nothing was changed"))
				return
			}
		}
		h(w, r, s)
	}
}

// signOut ends the session of a user who no longer checks out (revoked,
// expired, tenant suspended) and says why; nothing the request asked for
// is done.
func (c *Console) signOut(w http.ResponseWriter, r *http.Request, s Session, why error) {
	c.endSession(w, r, s, "signed out: "+why.Error())
	msg := fmt.Sprintf("signed out: %s no longer checks out (%v); nothing was done", s.Principal(), why)
	c.log.Warn("console: session ended", "principal", s.Principal(), "err", why)
	if strings.HasPrefix(r.URL.Path, "/console/api/") {
		http.Error(w, "console: "+msg, http.StatusUnauthorized)
		return
	}
	c.render(w, r, http.StatusUnauthorized, "login", view{Title: "Sign in", Error: msg, Data: Prefix})
}

// errScope is a tenant's operator reaching for another scope.
type errScope struct{ msg string }

func (e errScope) Error() string { return e.msg }

// scope is the tenant whose DLQs the request is about: a platform
// operator may name any (the scope parameter, "" the admin account); a
// tenant's operator only their own.
func (c *Console) scope(r *http.Request, s Session) (string, error) {
	want := strings.TrimSpace(r.FormValue("scope"))
	if s.Operator {
		return want, nil
	}
	if want != "" && want != s.Tenant {
		return "", errScope{fmt.Sprintf("forbidden: %s is an operator of tenant %s and cannot see or act on the DLQs of tenant %s", s.Principal(), s.Tenant, want)}
	}
	return s.Tenant, nil
}

// service returns the redrive service of the request's scope as the
// session's user may use it (Config.Access).
func (c *Console) service(r *http.Request, s Session) (string, *redrive.Guard, error) {
	scope, err := c.scope(r, s)
	if err != nil {
		return "", nil, err
	}
	svc, err := c.cfg.Redrive(r.Context(), scope)
	if err != nil {
		return "", nil, err
	}
	p := s.principal()
	a, err := c.cfg.Access(r.Context(), &p)
	if err != nil {
		return "", nil, err
	}
	return scope, svc.For(a), nil
}

// statusOf maps an error to its HTTP status.
func statusOf(err error) int {
	var es errScope
	var el errLogin
	switch {
	case errors.As(err, &es), errors.Is(err, redrive.ErrForbidden):
		return http.StatusForbidden
	case errors.As(err, &el):
		return el.code
	case errors.Is(err, redrive.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, redrive.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, redrive.ErrConflict):
		return http.StatusConflict
	}
	return http.StatusInternalServerError
}

func (c *Console) render(w http.ResponseWriter, r *http.Request, code int, page string, v view) {
	t := c.pages[page]
	if t == nil {
		http.Error(w, "console: no page "+page, http.StatusInternalServerError)
		return
	}
	if v.S != nil {
		v.CSRF = c.ss.csrf(*v.S)
		if v.S.Operator && c.cfg.Tenants != nil {
			v.Tenants, _ = c.cfg.Tenants(r.Context())
		}
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
	w.WriteHeader(code)
	if err := t.Execute(w, v); err != nil {
		c.log.Error("console: render", "page", page, "err", err)
	}
}

// fail shows err on the error page with its status.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, s *Session, code int, err error) {
	if code == 0 {
		code = statusOf(err)
	}
	if code >= 500 {
		c.log.Error("console: request failed", "path", r.URL.Path, "err", err)
	}
	c.render(w, r, code, "error", view{Title: http.StatusText(code), S: s, Error: err.Error()})
}
