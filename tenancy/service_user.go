package tenancy

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/msgplatform/platform/embeddednats"
)

// ServiceUserPrefix starts the name of every service user the platform
// mints in a tenant's account: audit records, connection events and
// `nats server report connections` show "platform-svc:<name>", so the
// platform's own connections are told apart from the tenant's users.
const ServiceUserPrefix = "platform-svc:"

// ServiceUserTag is the JWT tag of every platform service user (besides
// "tenant:<name>").
const ServiceUserTag = "platform-svc"

// ServiceUserName is the user name of platform service name in a tenant's
// account.
func ServiceUserName(name string) string { return ServiceUserPrefix + name }

// IsServiceUser reports whether a user name is one the platform minted
// for its own services (not a tenant's user).
func IsServiceUser(user string) bool { return strings.HasPrefix(user, ServiceUserPrefix) }

// ServiceUserCreds mints a user of tenant's account for the platform
// service name (redrive, canary...): named ServiceUserName(name), signed
// by the tenant's account signing key (opened from the registry with
// trust.json; see seal.go), unrestricted inside that account (like the
// ingest's own user) and nothing outside it. It is not recorded among the
// tenant's users (ListUsers does not show it, it takes no scope in the
// account JWT) and lives as long as the tenant is neither suspended
// (suspension revokes every user issued before it) nor deleted.
//
// It fails with ErrInvalid for a malformed name, ErrNotFound for an
// unknown tenant, ErrConflict for a suspended one, ErrClosed after Close.
func (m *Manager) ServiceUserCreds(ctx context.Context, tenant, name string) (token string, seed []byte, err error) {
	t, err := m.serviceTenant(ctx, tenant, name)
	if err != nil {
		return "", nil, err
	}
	token, seed, _, err = m.serviceUserJWT(t, name)
	return token, seed, err
}

// CountServiceConn counts a platform connection to tenant's account that
// was not opened by ConnectTenant (one opened with a service user's
// credentials, such as redrive's own connection for its runs) until the
// returned func is called, so Usage still reports the tenant's own
// connections. The connection must be within Config.PlatformConns.
func (m *Manager) CountServiceConn(tenant string) (done func()) {
	st := m.stats(tenant)
	st.Service.Add(1)
	var once sync.Once
	return func() { once.Do(func() { st.Service.Add(-1) }) }
}

// ConnectTenant connects to the cluster (Config.URL) as a fresh service
// user of tenant's account (see ServiceUserCreds); opts are applied after
// the credentials and the connection name (platform-svc:<name>@<tenant>).
// The caller closes the connection. A suspension closes it (the user is
// revoked): connect again after Resume.
func (m *Manager) ConnectTenant(ctx context.Context, tenant, name string, opts ...nats.Option) (*nats.Conn, error) {
	t, err := m.serviceTenant(ctx, tenant, name)
	if err != nil {
		return nil, err
	}
	token, seed, _, err := m.serviceUserJWT(t, name)
	if err != nil {
		return nil, err
	}
	all := append([]nats.Option{nats.UserJWTAndSeed(token, string(seed)), nats.Name(ServiceUserName(name) + "@" + tenant)}, opts...)
	nc, err := embeddednats.Connect(m.trust, m.cfg.URL, all...)
	if err != nil {
		return nil, fmt.Errorf("tenancy: connect service %s to tenant %s: %w", name, tenant, err)
	}
	// Counted until closed, so Usage reports the tenant's own
	// connections (see Config.PlatformConns).
	done := m.CountServiceConn(tenant)
	prev := nc.Opts.ClosedCB
	nc.SetClosedHandler(func(c *nats.Conn) {
		done()
		if prev != nil {
			prev(c)
		}
	})
	return nc, nil
}

// serviceTenant validates the names and reads tenant's record (with its
// sealed signing seed) from the registry; the tenant must be active.
func (m *Manager) serviceTenant(ctx context.Context, tenant, name string) (*Tenant, error) {
	if err := ValidateName("tenant", tenant); err != nil {
		return nil, err
	}
	if err := ValidateName("service", name); err != nil {
		return nil, err
	}
	m.mu.Lock()
	err := m.check()
	m.mu.Unlock()
	if err != nil {
		return nil, err
	}
	t, err := m.reg.get(ctx, tenant)
	if err != nil {
		return nil, err
	}
	if t.State != StateActive {
		return nil, fmt.Errorf("%w: tenant %s is %s: platform services cannot reach its account until it is resumed", ErrConflict, tenant, t.State)
	}
	return t, nil
}

// serviceUserJWT issues the service user: userJWT with no permissions
// (unrestricted in the account), the platform-svc name and tag.
func (m *Manager) serviceUserJWT(t *Tenant, name string) (token string, seed []byte, pub string, err error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", nil, "", err
	}
	pub, _ = kp.PublicKey()
	if seed, err = kp.Seed(); err != nil {
		return "", nil, "", err
	}
	signer, err := m.signer(t)
	if err != nil {
		return "", nil, "", fmt.Errorf("tenancy: tenant %s: %w", t.Name, err)
	}
	uc := jwt.NewUserClaims(pub)
	uc.Name = ServiceUserName(name)
	uc.IssuerAccount = t.Account
	uc.Tags.Add("tenant:" + t.Name)
	uc.Tags.Add(ServiceUserTag)
	if token, err = uc.Encode(signer); err != nil {
		return "", nil, "", fmt.Errorf("tenancy: tenant %s: encode service user %s: %w", t.Name, name, err)
	}
	return token, seed, pub, nil
}

// TenantJetStream returns the JetStream context of this manager's own
// platform connection to tenant's account (the one its ingest runs on,
// leading or standing by), for a platform service that must not open a
// connection of its own (every connection counts against the tenant's
// connection quota). The context is that of the current runtime: a
// suspension, resume or Close replaces or closes it, so callers ask again
// and compare (an old one fails with a closed connection). It fails with
// ErrNotFound when the tenant does not run on this manager (unknown,
// suspended, or not yet synced by the heartbeat).
func (m *Manager) TenantJetStream(tenant string) (jetstream.JetStream, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(); err != nil {
		return nil, err
	}
	rt := m.rts[tenant]
	if rt == nil {
		return nil, fmt.Errorf("%w: tenant %q is not running on this daemon (unknown or suspended)", ErrNotFound, tenant)
	}
	return rt.js, nil
}
