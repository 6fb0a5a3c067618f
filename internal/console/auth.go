package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"

	"github.com/msgplatform/platform/internal/principal"
)

const cookieName = "platform_console"

// Session is a signed-in user: who the broker authenticated.
type Session struct {
	ID string `json:"id"`
	// User is the name in the user JWT; UserKey its public key.
	User    string `json:"u"`
	UserKey string `json:"k"`
	// Account is the user's NATS account; Tenant the tenant owning it
	// ("" for the platform admin account: an Operator).
	Account  string `json:"a"`
	Tenant   string `json:"t,omitempty"`
	Operator bool   `json:"op,omitempty"`
	Expires  int64  `json:"exp"`
	// Issuer is the key that signed the user JWT; IssuedAt and UserExp
	// its times (Unix seconds; UserExp 0: never). Every request re-checks
	// them against the account's current revocations and signing keys.
	Issuer   string `json:"i"`
	IssuedAt int64  `json:"iat"`
	UserExp  int64  `json:"uexp,omitempty"`
}

// principal is the session's user, for principal.Verifier.Check.
func (s Session) principal() principal.Principal {
	return principal.Principal{User: s.User, UserKey: s.UserKey, Account: s.Account, Tenant: s.Tenant, Operator: s.Operator,
		Issuer: s.Issuer, IssuedAt: s.IssuedAt, Expires: s.UserExp}
}

// Principal is the identity recorded on every action: user@tenant, or
// user@platform for a platform operator; platformd names a signed control
// request's principal with the same function (principal.Principal.Name).
func (s Session) Principal() string { return s.principal().Name() }

// sessions signs and checks session cookies and CSRF tokens.
type sessions struct {
	key []byte
	ttl time.Duration
	mu  sync.Mutex
	out map[string]time.Time // logged-out session ids until they expire
}

// newSessions signs with key, or with a key drawn at random when key is
// empty (sessions then end with the process).
func newSessions(key []byte, ttl time.Duration) (*sessions, error) {
	if len(key) == 0 {
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("console: session key: %w", err)
		}
	}
	return &sessions{key: key, ttl: ttl, out: map[string]time.Time{}}, nil
}

func (ss *sessions) mac(parts ...string) []byte {
	m := hmac.New(sha256.New, ss.key)
	for _, p := range parts {
		m.Write([]byte(p))
		m.Write([]byte{0})
	}
	return m.Sum(nil)
}

// issue sets the session cookie for s, valid for the TTL or until the
// user JWT expires, whichever is first.
func (ss *sessions) issue(w http.ResponseWriter, r *http.Request, s Session) Session {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	s.ID = hex.EncodeToString(b)
	s.Expires = time.Now().Add(ss.ttl).Unix()
	if s.UserExp > 0 && s.UserExp < s.Expires {
		s.Expires = s.UserExp
	}
	body, _ := json.Marshal(s)
	payload := base64.RawURLEncoding.EncodeToString(body)
	sig := base64.RawURLEncoding.EncodeToString(ss.mac("session", payload))
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: payload + "." + sig, Path: "/console/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, Expires: time.Unix(s.Expires, 0)})
	return s
}

// read returns the request's session, or false when there is none or it
// is forged, expired or logged out.
func (ss *sessions) read(r *http.Request) (Session, bool) {
	c, err := r.Cookie(cookieName)
	if err != nil {
		return Session{}, false
	}
	payload, sig, ok := strings.Cut(c.Value, ".")
	if !ok {
		return Session{}, false
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, ss.mac("session", payload)) {
		return Session{}, false
	}
	body, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return Session{}, false
	}
	var s Session
	if json.Unmarshal(body, &s) != nil || time.Now().Unix() >= s.Expires {
		return Session{}, false
	}
	ss.mu.Lock()
	_, gone := ss.out[s.ID]
	ss.mu.Unlock()
	return s, !gone
}

// forget logs s out and clears the cookie.
func (ss *sessions) forget(w http.ResponseWriter, r *http.Request, s Session) {
	ss.mu.Lock()
	now := time.Now()
	for id, exp := range ss.out {
		if now.After(exp) {
			delete(ss.out, id)
		}
	}
	ss.out[s.ID] = time.Unix(s.Expires, 0)
	ss.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/console/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
}

// csrf is the anti-forgery token of session s: every form posts it.
func (ss *sessions) csrf(s Session) string {
	return base64.RawURLEncoding.EncodeToString(ss.mac("csrf", s.ID))
}

func (ss *sessions) checkCSRF(s Session, token string) bool {
	got, err := base64.RawURLEncoding.DecodeString(token)
	return err == nil && token != "" && hmac.Equal(got, ss.mac("csrf", s.ID))
}

// errLogin is a sign-in refused; its message says what was wrong.
type errLogin struct {
	code int
	msg  string
}

func (e errLogin) Error() string { return e.msg }

// authenticate checks creds (the text of a .creds file) with the broker:
// it connects to url with them and, only if the server accepts the
// connection, returns the session of the user its JWT names. The JWT's
// account (its issuer account, checked by the server against the
// account's signing keys) decides the scope.
func (c *Console) authenticate(ctx context.Context, creds string) (Session, error) {
	creds = strings.TrimSpace(creds)
	if creds == "" {
		return Session{}, errLogin{http.StatusBadRequest, "paste the contents of your .creds file (or choose the file)"}
	}
	token, err := jwt.ParseDecoratedJWT([]byte(creds))
	if err != nil || !strings.Contains(creds, "-----BEGIN") {
		return Session{}, errLogin{http.StatusBadRequest, "this is not a NATS .creds file: expected a -----BEGIN NATS USER JWT----- block and a -----BEGIN USER NKEY SEED----- block"}
	}
	uc, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return Session{}, errLogin{http.StatusBadRequest, fmt.Sprintf("the .creds file's user JWT is malformed: %v", err)}
	}
	kp, err := jwt.ParseDecoratedUserNKey([]byte(creds))
	if err != nil {
		return Session{}, errLogin{http.StatusBadRequest, fmt.Sprintf("the .creds file's user seed is missing or malformed: %v", err)}
	}
	seed, err := kp.Seed()
	if err != nil {
		return Session{}, errLogin{http.StatusBadRequest, fmt.Sprintf("the .creds file's user seed is unusable: %v", err)}
	}
	if pub, _ := kp.PublicKey(); pub != uc.Subject {
		return Session{}, errLogin{http.StatusBadRequest, "the .creds file's seed does not belong to its user JWT"}
	}
	opts := []nats.Option{nats.UserJWTAndSeed(token, string(seed)), nats.Name("platform-console-login"),
		nats.Timeout(5 * time.Second), nats.MaxReconnects(0), nats.NoReconnect()}
	if c.cfg.TLS != nil {
		opts = append(opts, nats.Secure(c.cfg.TLS))
	}
	nc, err := nats.Connect(c.cfg.URL, opts...)
	if err != nil {
		if errors.Is(err, nats.ErrNoServers) {
			return Session{}, errLogin{http.StatusServiceUnavailable, fmt.Sprintf("cannot reach the local NATS node to check the credentials: %v", err)}
		}
		return Session{}, errLogin{http.StatusUnauthorized, fmt.Sprintf("the broker refused these credentials (%v): the user or its account is unknown to this installation, revoked or expired, or its tenant is suspended", err)}
	}
	nc.Close()
	account, name := principal.UserOf(uc)
	s := Session{User: name, UserKey: uc.Subject, Account: account, Issuer: uc.Issuer, IssuedAt: uc.IssuedAt, UserExp: uc.Expires}
	if account == c.cfg.AdminAccount {
		s.Operator = true
		return s, nil
	}
	tenant, err := c.tenantOf(ctx, account)
	if err != nil {
		return Session{}, err
	}
	if tenant == "" {
		return Session{}, errLogin{http.StatusForbidden, fmt.Sprintf("account %s is neither the platform admin account nor a tenant's: it has no DLQs to review", account)}
	}
	s.Tenant = tenant
	return s, nil
}

func (c *Console) tenantOf(ctx context.Context, account string) (string, error) {
	if c.cfg.Tenants == nil {
		return "", nil
	}
	ts, err := c.cfg.Tenants(ctx)
	if err != nil {
		return "", fmt.Errorf("console: list tenants: %w", err)
	}
	for _, t := range ts {
		if t.Account == account {
			return t.Name, nil
		}
	}
	return "", nil
}
