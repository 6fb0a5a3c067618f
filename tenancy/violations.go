package tenancy

import (
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/msgplatform/platform/embeddednats"
)

// Per-subject authorization denials. nats-server (2.15) publishes no
// advisory for a permission violation: it sends the client
// -ERR 'Permissions Violation for Publish to "x"' (or Subscription) and
// logs "Publish Violation - Subject" / "Subscription Violation - Subject"
// at error level, prefixed with the connection's "ACCOUNT/NAME/jwt:USER"
// (the account and user public keys the server authenticated). WatchViolations
// wraps an embedded server's logger to take those lines: each violation
// by a tenant user is counted (Denied, platform_tenant_auth_denied_total)
// and audited (auth.denied naming the tenant, user, subject and
// operation), at most one record per tenant, user, operation and subject
// every violationEvery. Lines still go to the server's own logger.

// violationEvery bounds the audit records of one repeated violation.
const violationEvery = 10 * time.Second

// violationLine matches the server's log line of a permission violation:
// `... - "ACCOUNT/NAME/jwt:USER" - Publish Violation - Subject "x"` (also
// `Reply "x"` and `Subscription Violation - Subject "x", SID 1`).
var violationLine = regexp.MustCompile(`"(A[A-Z2-7]{55})(?:/[^"/]*)?/jwt:(U[A-Z2-7]{55})" - (Publish|Subscription) Violation(?: Too Many Tokens)? - (Subject|Reply) "([^"]*)"(?:, Queue: "([^"]*)")?`)

// WatchViolations makes srv's permission violations audited (see above).
// It replaces srv's logger with one that passes every call on to the
// logger srv had (none if it had none); call it once per embedded node.
func (m *Manager) WatchViolations(srv *server.Server) {
	if srv == nil {
		return
	}
	next := srv.Logger()
	if next == nil {
		next = embeddednats.Discard{}
	}
	srv.SetLogger(&violationLogger{Logger: next, m: m, last: map[string]time.Time{}}, false, false)
}

// violationLogger passes every line on to the server's previous logger
// (embedded) and observes the error lines.
type violationLogger struct {
	server.Logger
	m *Manager

	mu   sync.Mutex
	last map[string]time.Time // tenant/user/op/subject -> last record
}

func (l *violationLogger) Errorf(format string, v ...any) {
	l.Logger.Errorf(format, v...)
	l.observe(fmt.Sprintf(format, v...))
}

// observe records line if it is a tenant user's permission violation.
func (l *violationLogger) observe(line string) {
	sm := violationLine.FindStringSubmatch(line)
	if sm == nil {
		return
	}
	acc, userKey, kind, what, subject, queue := sm[1], sm[2], sm[3], sm[4], sm[5], sm[6]
	tenant, user := l.m.userOfKey(acc, userKey)
	if tenant == "" {
		return // not a tenant (the platform's own accounts)
	}
	op := "publish"
	switch {
	case kind == "Subscription":
		op = "subscribe"
	case what == "Reply":
		op = "publish-with-reply"
	}
	l.m.countViolation(tenant)
	key := tenant + "/" + user + "/" + op + "/" + subject
	now := time.Now()
	l.mu.Lock()
	if now.Sub(l.last[key]) < violationEvery {
		l.mu.Unlock()
		return
	}
	l.last[key] = now
	if len(l.last) > 10000 { // bounded: forget the oldest burst
		clear(l.last)
		l.last[key] = now
	}
	l.mu.Unlock()
	detail := fmt.Sprintf("user %s (%s) denied %s on subject %q", user, userKey, op, subject)
	if queue != "" {
		detail += fmt.Sprintf(" (queue %q)", queue)
	}
	l.m.auditAsync(Record{Actor: "nats-server", Action: ActionAuthDenied, Tenant: tenant, Target: user,
		After: map[string]string{"user": user, "operation": op, "subject": subject, "queue": queue}, Detail: detail})
}

// keyIndex maps account and user public keys to names for the
// violation logger, which runs on the servers' client goroutines and so
// never waits for m.mu (held across whole changes).
type keyIndex struct {
	accounts   sync.Map // account public key -> tenant name
	users      sync.Map // user public key -> user name
	signers    sync.Map // account signing key -> tenant name (it signs the platform's users)
	violations sync.Map // tenant -> *atomic.Uint64
}

// index records t's account and users. Callers may hold m.mu.
func (m *Manager) index(t *Tenant) {
	m.keys.accounts.Store(t.Account, t.Name)
	if t.SigningKey != "" {
		m.keys.signers.Store(t.SigningKey, t.Name)
	}
	for _, u := range t.Users {
		m.keys.users.Store(u.PublicKey, u.Name)
	}
}

// userOfKey names the tenant of account acc and its user with public key
// userKey (the key itself when the user is not in the index).
func (m *Manager) userOfKey(acc, userKey string) (tenant, user string) {
	v, ok := m.keys.accounts.Load(acc)
	if !ok {
		return "", ""
	}
	if u, ok := m.keys.users.Load(userKey); ok {
		return v.(string), u.(string)
	}
	return v.(string), userKey
}

func (m *Manager) countViolation(tenant string) {
	v, _ := m.keys.violations.LoadOrStore(tenant, new(atomic.Uint64))
	v.(*atomic.Uint64).Add(1)
}
