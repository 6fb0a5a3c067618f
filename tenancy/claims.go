package tenancy

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/msgplatform/platform/internal/gather"
)

// claimsUpdateSubject is where every node's full resolver takes account
// JWT updates (each node replies).
const claimsUpdateSubject = "$SYS.REQ.CLAIMS.UPDATE"

// accountJWT encodes t's account JWT, signed by the operator signing key:
// the quota as limits, the signing key for users, the revocations, and a
// suspension as a revocation of every user issued until then plus a
// connection limit of 0.
func (m *Manager) accountJWT(t *Tenant) (string, error) {
	ac := jwt.NewAccountClaims(t.Account)
	ac.Name = t.Name
	ac.Tags.Add("tenant:" + t.Name)
	ac.SigningKeys.Add(t.SigningKey)
	userScopes(t, ac)
	q := t.Quota
	ac.Limits.Conn = connLimit(q.Connections, m.cfg.PlatformConns)
	ac.Limits.LeafNodeConn = 0
	ac.Limits.Payload = q.MaxPayload
	ac.Limits.Subs = jwt.NoLimit
	ac.Limits.Data = jwt.NoLimit
	ac.Limits.Imports, ac.Limits.Exports = 0, 0
	ac.Limits.WildcardExports = false
	shareClaims(t, ac)
	gateMappings(ac)
	tier := func(s Tier) jwt.JetStreamLimits {
		return jwt.JetStreamLimits{
			MemoryStorage: s.Memory, DiskStorage: s.Disk,
			Streams: int64(q.Streams), Consumer: int64(q.Consumers), MaxAckPending: int64(q.MaxAckPending),
		}
	}
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{}
	ac.Limits.JetStreamTieredLimits = jwt.JetStreamTieredLimits{"R1": tier(q.Storage.R1), "R3": tier(q.Storage.R3)}
	for pub, at := range t.Revoked {
		ac.RevokeAt(pub, time.Unix(at, 0))
	}
	if t.State == StateSuspended && t.Suspended != nil {
		ac.RevokeAt(jwt.All, *t.Suspended)
		ac.Limits.Conn = 0
	}
	var vr jwt.ValidationResults
	ac.Validate(&vr)
	if err := vr.Errors(); len(err) > 0 {
		return "", fmt.Errorf("%w: account claims of %s: %v", ErrInvalid, t.Name, err)
	}
	return ac.Encode(m.opSigner)
}

// connLimit is the account's connection limit for a quota of quota
// connections (-1: unlimited): the quota plus the platform's own
// connections (Config.PlatformConns), which would otherwise take the
// tenant's slots (with a quota of 1, the ingest's runtime connection would
// leave the tenant none). While the platform holds fewer than its
// reservation, the servers let the tenant open that many more than its
// quota; the manager closes those (connquota.go). Usage reports the
// tenant's own connections against the quota.
func connLimit(quota, platform int) int64 {
	if quota < 0 {
		return jwt.NoLimit
	}
	return int64(quota + platform)
}

// push sends an account JWT to every node's resolver and checks the
// replies: any node refusing it is an error; no reply at all is ErrPush;
// fewer replies than Config.Servers is logged (a node that was down syncs
// the JWT from its peers' resolvers when it comes back, and Start pushes
// every tenant again).
func (m *Manager) push(ctx context.Context, token string) error {
	ok, err := gather.Collect(ctx, m.sys, claimsUpdateSubject, []byte(token), gather.Options{Want: m.cfg.Servers, Wait: m.cfg.PushTimeout}, func(msg *nats.Msg) (bool, error) {
		var r server.ServerAPIClaimUpdateResponse
		if err := json.Unmarshal(msg.Data, &r); err != nil {
			return false, fmt.Errorf("undecodable reply: %v", err)
		}
		if r.Error != nil {
			name := ""
			if r.Server != nil {
				name = r.Server.Name
			}
			return false, fmt.Errorf("node %s: %s", name, r.Error.Description)
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrPush, err)
	}
	if ok == 0 {
		return fmt.Errorf("%w: no node replied within %s", ErrPush, m.cfg.PushTimeout)
	}
	if ok < m.cfg.Servers {
		m.log.Warn("tenancy: account JWT accepted by fewer nodes than expected; the others sync it from their peers", "accepted", ok, "expected", m.cfg.Servers)
	}
	return nil
}

// userScopes adds the scoped signing key of every user that has one and
// is not revoked, with the user's permissions as the scope's template. A
// revoked user's key is left out, so the servers refuse it even without
// the revocation. If a user's permissions no longer derive (an object it
// named is gone), its template keeps only its inbox.
func userScopes(t *Tenant, ac *jwt.AccountClaims) {
	for _, name := range slices.Sorted(maps.Keys(t.Users)) {
		u := t.Users[name]
		if u.ScopeKey == "" || u.Revoked != nil {
			continue
		}
		perms, err := permissions(t, UserSpec{Name: u.Name, Pub: u.Pub, Sub: u.Sub})
		if err != nil {
			perms = jwt.Permissions{Sub: jwt.Permission{Allow: []string{InboxPrefix(u.Name) + ".>"}}}
		}
		scope := jwt.NewUserScope()
		scope.Key, scope.Role = u.ScopeKey, "user:"+u.Name
		if t.settling == u.Name {
			scope.Description = "settling a permission change"
		}
		scope.Template = jwt.UserPermissionLimits{Permissions: perms,
			Limits: jwt.Limits{NatsLimits: jwt.NatsLimits{Subs: jwt.NoLimit, Data: jwt.NoLimit, Payload: jwt.NoLimit}}}
		ac.SigningKeys.AddScopedSigner(scope)
	}
}

// scopedUserJWT issues a user of t signed by a new scoped signing key of
// its own, with no permissions in the JWT (the servers take them from
// the scope's template in the account JWT). The key's seed is dropped.
func scopedUserJWT(t *Tenant, name string) (token string, seed []byte, pub, scopeKey string, err error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", nil, "", "", err
	}
	pub, _ = kp.PublicKey()
	if seed, err = kp.Seed(); err != nil {
		return "", nil, "", "", err
	}
	sk, err := nkeys.CreateAccount()
	if err != nil {
		return "", nil, "", "", err
	}
	scopeKey, _ = sk.PublicKey()
	uc := jwt.NewUserClaims(pub)
	uc.Name = name
	uc.IssuerAccount = t.Account
	uc.UserPermissionLimits = jwt.UserPermissionLimits{}
	if token, err = uc.Encode(sk); err != nil {
		return "", nil, "", "", fmt.Errorf("tenancy: encode user %s: %w", name, err)
	}
	return token, seed, pub, scopeKey, nil
}

// signer returns t's account signing key.
func (m *Manager) signer(t *Tenant) (nkeys.KeyPair, error) {
	seed, err := m.seal.open(t.SealedSigningSeed, t.Account)
	if err != nil {
		return nil, err
	}
	return nkeys.FromSeed(seed)
}

// userJWT issues a user of t with perms, signed by t's signing key.
func (m *Manager) userJWT(t *Tenant, name string, perms jwt.Permissions) (token string, seed []byte, pub string, err error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", nil, "", err
	}
	if pub, err = kp.PublicKey(); err != nil {
		return "", nil, "", err
	}
	if seed, err = kp.Seed(); err != nil {
		return "", nil, "", err
	}
	signer, err := m.signer(t)
	if err != nil {
		return "", nil, "", err
	}
	uc := jwt.NewUserClaims(pub)
	uc.Name = name
	uc.IssuerAccount = t.Account
	uc.Permissions = perms
	uc.Tags.Add("tenant:" + t.Name)
	if token, err = uc.Encode(signer); err != nil {
		return "", nil, "", fmt.Errorf("tenancy: encode user %s: %w", name, err)
	}
	return token, seed, pub, nil
}

// newAccount makes the keys of a new tenant: the account identity key is
// used once (its public key names the account) and discarded; the
// signing key's seed is sealed.
func (m *Manager) newAccount(t *Tenant) error {
	acc, err := nkeys.CreateAccount()
	if err != nil {
		return err
	}
	sk, err := nkeys.CreateAccount()
	if err != nil {
		return err
	}
	t.Account, _ = acc.PublicKey()
	t.SigningKey, _ = sk.PublicKey()
	seed, _ := sk.Seed()
	t.SealedSigningSeed, err = m.seal.seal(seed, t.Account)
	return err
}
