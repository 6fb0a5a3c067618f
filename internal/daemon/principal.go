package daemon

import (
	"context"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/principal"
	"github.com/msgplatform/platform/tenancy"
)

// newVerifier checks signed control requests (internal/principal)
// against the accounts this daemon's nodes hold now: the platform admin
// account and the tenants' (their revocations, signing keys and
// suspension).
func (d *Daemon) newVerifier() (*principal.Verifier, error) { return d.NewVerifier() }

// NewVerifier returns a verifier of signed control requests as a
// platformd of this installation has one: its own caches, and the
// installation-wide replay record (the platform-nonces KV bucket). The
// daemon's control API uses one; tests use another to act as a second
// platformd.
func (d *Daemon) NewVerifier() (*principal.Verifier, error) {
	strict := false
	if oc, err := jwt.DecodeOperatorClaims(d.trust.OperatorJWT); err == nil {
		strict = oc.StrictSigningKeyUsage
	}
	return principal.New(principal.Config{
		AdminAccount:      d.trust.AdminAccount(),
		AccountJWT:        d.accountJWT,
		Tenants:           d.principalTenants,
		StrictSigningKeys: strict,
		Record:            d.recordNonce(),
		RevokedOperator:   d.operatorRevoked,
	})
}

// NonceBucket is the replicated KV bucket recording the nonces of signed
// control requests for NonceTTL (longer than twice the verifier's 2 min
// skew), so a request is accepted once by the whole installation.
const (
	NonceBucket = "platform-nonces"
	NonceTTL    = 5 * time.Minute
)

// recordNonce records a signed request's (user, nonce) in NonceBucket
// (opened on first use), refusing one recorded before.
func (d *Daemon) recordNonce() func(ctx context.Context, key string) error {
	var (
		mu sync.Mutex
		kv jetstream.KeyValue
	)
	return func(ctx context.Context, key string) error {
		mu.Lock()
		if kv == nil {
			b, err := d.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
				Bucket: NonceBucket, Description: "nonces of signed control requests (replay protection)",
				TTL: NonceTTL, History: 1, Replicas: d.cfg.Durability().Replicas, Storage: jetstream.FileStorage, MaxBytes: 64 << 20,
			})
			if err != nil {
				b, err = d.js.KeyValue(ctx, NonceBucket)
			}
			if err != nil {
				mu.Unlock()
				return fmt.Errorf("nonce bucket %s: %w", NonceBucket, err)
			}
			kv = b
		}
		b := kv
		mu.Unlock()
		h := sha256.Sum256([]byte(key))
		_, err := b.Create(ctx, hex.EncodeToString(h[:]), nil)
		if errors.Is(err, jetstream.ErrKeyExists) {
			return principal.ErrReplayed
		}
		return err
	}
}

// accountJWT is an account's JWT as a local node's resolver holds it.
func (d *Daemon) accountJWT(_ context.Context, account string) (string, error) {
	var last error = errors.New("no local node is running")
	for _, n := range d.nodes {
		srv := n.Server()
		if srv == nil || srv.AccountResolver() == nil {
			continue
		}
		tok, err := srv.AccountResolver().Fetch(account)
		if err == nil && tok != "" {
			return tok, nil
		}
		last = err
	}
	return "", last
}

func (d *Daemon) principalTenants(ctx context.Context) ([]principal.Tenant, error) {
	return tenantsAs(ctx, d, func(t tenancy.Tenant) principal.Tenant {
		return principal.Tenant{Name: t.Name, Account: t.Account, Suspended: t.State != tenancy.StateActive}
	})
}

// caller is who sent a control request: the authenticated principal of a
// signed request, or nobody (an unsigned request: the name it gives is
// recorded as unauthenticated:<name>).
type caller struct {
	p *principal.Principal
}

func (c caller) authenticated() bool { return c.p != nil }

// name is the principal recorded for the action: the authenticated name,
// or the name an unsigned request claims, marked as such ("" stays "",
// so the request's own validation asks for it).
func (c caller) name(claimed string) string {
	switch {
	case c.p != nil:
		return c.p.Name()
	case claimed == "":
		return ""
	}
	return principal.Unauthenticated + claimed
}

// mayAct refuses a tenant's user acting outside its tenant (scope "" is
// the platform admin account). An unsigned request holds the admin
// credentials, so it may act anywhere.
func (c caller) mayAct(scope string) error {
	if c.p == nil {
		return nil
	}
	return c.p.MayAct(scope)
}

// needAuth refuses an unsigned request for what requires an
// authenticated principal.
func (c caller) needAuth(what string) error {
	if c.p != nil {
		return nil
	}
	return refused{fmt.Errorf("%w: %s needs an authenticated principal: pass --user-creds FILE (your .creds, or set PLATFORM_USER_CREDS) so platformctl signs the request; nothing was done", principal.ErrUnauthenticated, what)}
}

// authErr maps a verification failure onto the control API's kinds: a
// malformed envelope is invalid (400), a refused principal a 409 with its
// message.
func authErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, principal.ErrMalformed):
		return fmt.Errorf("%w: %w", control.ErrInvalid, err)
	case errors.Is(err, principal.ErrUnauthenticated):
		return refused{err}
	}
	return err
}

// signedRep is rep for state-changing endpoints: a signed request
// (principal.Envelope) is verified against subject and unwrapped, and fn
// gets its caller; an unsigned one reaches fn with no principal.
func signedRep[Req, Resp any](v *principal.Verifier, name, subject string, fn func(ctx context.Context, c caller, req Req) (Resp, error)) control.Endpoint {
	full := control.SubjectPrefix + "." + subject
	return control.Endpoint{Name: name, Subject: subject, Handle: func(ctx context.Context, body []byte) (any, error) {
		var c caller
		if env, ok := principal.Open(body); ok {
			p, err := v.Verify(ctx, full, env)
			if err != nil {
				return nil, authErr(err)
			}
			c.p, body = &p, env.Body
		}
		return control.JSON(func(ctx context.Context, r Req) (Resp, error) {
			resp, err := fn(ctx, c, r)
			return resp, redriveErr(authErr(err))
		})(ctx, body)
	}}
}

// consoleSessionKey is the key signing this installation's web console
// sessions (ConsoleSessionKey).
func (d *Daemon) consoleSessionKey() ([]byte, error) { return ConsoleSessionKey(d.trust) }

// ConsoleSessionKey derives the key signing web console sessions from the
// installation's trust (the operator signing seed every node shares), so
// every platformd of the installation accepts a session another one
// issued.
func ConsoleSessionKey(t *embeddednats.Trust) ([]byte, error) {
	key, err := hkdf.Key(sha256.New, []byte(t.OperatorSigningSeed), nil, "msgplatform console session key v1", 32)
	if err != nil {
		return nil, fmt.Errorf("daemon: console session key: %w", err)
	}
	return key, nil
}
