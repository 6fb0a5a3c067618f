package principal

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/msgplatform/platform/internal/validate"
)

// Tenant is what the verifier needs to know of a tenant.
type Tenant struct {
	Name      string
	Account   string
	Suspended bool
}

// Config wires a Verifier to the installation.
type Config struct {
	// AdminAccount is the platform admin account's public key.
	AdminAccount string
	// AccountJWT returns an account's current JWT as the broker holds it
	// (the node's resolver).
	AccountJWT func(ctx context.Context, account string) (string, error)
	// Tenants lists the tenants (nil: none).
	Tenants func(ctx context.Context) ([]Tenant, error)
	// StrictSigningKeys refuses users signed by an account's identity
	// key, as the broker does when the operator sets
	// strict_signing_key_usage.
	StrictSigningKeys bool
	// MaxSkew bounds |now - request time| (default 2m).
	MaxSkew time.Duration
	// Nonces bounds the replay cache (default 100,000).
	Nonces int
	// CacheTTL is how long an account, the tenant list and a user's
	// check are reused (default 1s): a revocation takes effect within it.
	CacheTTL time.Duration
	// Record, when set, records a (user, nonce) key installation-wide
	// (platformd: a replicated KV bucket whose keys live longer than
	// 2×MaxSkew), so a request replayed to another daemon is refused too.
	// It returns ErrReplayed when the key was recorded before; any other
	// error refuses the request (replay protection cannot be checked).
	Record func(ctx context.Context, key string) error
	// RevokedOperator, when set, looks a platform admin account user's
	// public key up in the operator registry (OperatorBucket): ok when the
	// key was revoked, with its record. Any error refuses the request
	// (revocation cannot be checked). A revoked operator is refused even
	// where the broker's account JWT does not list the key yet.
	RevokedOperator func(ctx context.Context, userKey string) (op Operator, ok bool, err error)
	// Now is the clock (tests).
	Now func() time.Time
}

// ErrReplayed is Config.Record's answer for a key recorded before.
var ErrReplayed = errors.New("principal: replayed")

// Validate reports every missing piece.
func (c Config) Validate() error {
	var p validate.Problems
	if c.AdminAccount == "" {
		p.Addf("admin_account", "name the platform admin account")
	}
	if c.AccountJWT == nil {
		p.Addf("account_jwt", "is required: where the current account JWTs are read")
	}
	if c.MaxSkew < 0 || c.Nonces < 0 || c.CacheTTL < 0 {
		p.Addf("limits", "max_skew, nonces and cache_ttl must be >= 0")
	}
	return p.Err(errors.New("principal: invalid config"))
}

// Verifier checks signed requests and re-checks principals.
type Verifier struct {
	cfg Config

	mu       sync.Mutex
	accounts map[string]cachedAccount
	tenants  cachedTenants
	checked  map[string]cachedCheck // user key -> last check
	nonces   *nonceCache
}

type cachedAccount struct {
	ac  *jwt.AccountClaims
	err error
	at  time.Time
}

type cachedTenants struct {
	byAccount map[string]Tenant
	at        time.Time
}

type cachedCheck struct {
	err error
	at  time.Time
}

// New returns a verifier.
func New(cfg Config) (*Verifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxSkew == 0 {
		cfg.MaxSkew = 2 * time.Minute
	}
	if cfg.Nonces == 0 {
		cfg.Nonces = 100_000
	}
	if cfg.CacheTTL == 0 {
		cfg.CacheTTL = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Verifier{cfg: cfg, accounts: map[string]cachedAccount{}, checked: map[string]cachedCheck{},
		nonces: newNonceCache(cfg.Nonces)}, nil
}

// Verify checks e, a request on subject (the full control subject), and
// returns its principal and body. Nothing may be done on an error.
func (v *Verifier) Verify(ctx context.Context, subject string, e Envelope) (Principal, error) {
	a := e.Auth
	if a == nil || a.JWT == "" || a.Sig == "" || a.Nonce == "" || a.Time == 0 {
		return Principal{}, fmt.Errorf("%w: signed request: auth needs jwt, ts, nonce and sig", ErrMalformed)
	}
	if len(a.Nonce) > 128 {
		return Principal{}, fmt.Errorf("%w: signed request: nonce longer than 128 characters", ErrMalformed)
	}
	uc, err := jwt.DecodeUserClaims(a.JWT)
	if err != nil {
		return Principal{}, fmt.Errorf("%w: the user JWT does not decode or its signature is wrong: %v", ErrUnauthenticated, err)
	}
	sig, err := base64.RawURLEncoding.DecodeString(a.Sig)
	if err != nil {
		return Principal{}, fmt.Errorf("%w: signed request: sig is not base64url: %v", ErrMalformed, err)
	}
	pub, err := nkeys.FromPublicKey(uc.Subject)
	if err != nil {
		return Principal{}, fmt.Errorf("%w: the user JWT's subject %q is not a user key", ErrUnauthenticated, uc.Subject)
	}
	if err := pub.Verify(Message(subject, a.Time, a.Nonce, e.Body), sig); err != nil {
		return Principal{}, fmt.Errorf("%w: the request's signature does not verify with user %s's key (forged, or signed for another operation or body); nothing was done", ErrUnauthenticated, uc.Subject)
	}
	now := v.cfg.Now()
	ts := time.Unix(0, a.Time)
	if d := now.Sub(ts); d > v.cfg.MaxSkew || d < -v.cfg.MaxSkew {
		return Principal{}, fmt.Errorf("%w: the request was signed at %s, %s from this server's clock (at most ±%s): a stale or replayed request, or a skewed clock; nothing was done",
			ErrUnauthenticated, ts.UTC().Format(time.RFC3339), d.Round(time.Second), v.cfg.MaxSkew)
	}
	p, err := v.identify(ctx, uc)
	if err != nil {
		return Principal{}, err
	}
	key := uc.Subject + " " + a.Nonce
	if err := v.nonces.add(key, ts.Add(v.cfg.MaxSkew), now); err != nil {
		return Principal{}, err
	}
	if v.cfg.Record != nil {
		switch err := v.cfg.Record(ctx, key); {
		case errors.Is(err, ErrReplayed):
			return Principal{}, fmt.Errorf("%w: this signed request was already received by another platformd of the installation (replayed nonce); nothing was done", ErrUnauthenticated)
		case err != nil:
			return Principal{}, fmt.Errorf("%w: cannot record the request's nonce for replay protection (%v); retry; nothing was done", ErrUnauthenticated, err)
		}
	}
	return p, nil
}

// Identify checks a user JWT against the installation as it is now and
// returns its principal.
func (v *Verifier) Identify(ctx context.Context, userJWT string) (Principal, error) {
	uc, err := jwt.DecodeUserClaims(userJWT)
	if err != nil {
		return Principal{}, fmt.Errorf("%w: the user JWT does not decode or its signature is wrong: %v", ErrUnauthenticated, err)
	}
	return v.identify(ctx, uc)
}

// UserOf returns the account a user JWT belongs to (its issuer account
// when a signing key issued it) and the user's name (its public key when
// the JWT names none).
func UserOf(uc *jwt.UserClaims) (account, name string) {
	account = uc.IssuerAccount
	if account == "" {
		account = uc.Issuer
	}
	name = uc.Name
	if name == "" {
		name = uc.Subject
	}
	return account, name
}

func (v *Verifier) identify(ctx context.Context, uc *jwt.UserClaims) (Principal, error) {
	account, name := UserOf(uc)
	p := Principal{User: name, UserKey: uc.Subject, Account: account, Issuer: uc.Issuer, IssuedAt: uc.IssuedAt, Expires: uc.Expires}
	if account == v.cfg.AdminAccount {
		p.Operator = true
	} else {
		t, err := v.tenantOf(ctx, account)
		if err != nil {
			return Principal{}, err
		}
		p.Tenant = t.Name
	}
	return p, v.check(ctx, p, false)
}

// Check re-checks p against the installation as it is now (revoked,
// expired, suspended, signing key removed), reusing a result for
// CacheTTL.
func (v *Verifier) Check(ctx context.Context, p Principal) error {
	return v.check(ctx, p, true)
}

func (v *Verifier) check(ctx context.Context, p Principal, cached bool) error {
	now := v.cfg.Now()
	key := p.UserKey + " " + p.Issuer + " " + p.Account
	if cached {
		v.mu.Lock()
		c, ok := v.checked[key]
		v.mu.Unlock()
		if ok && now.Sub(c.at) < v.cfg.CacheTTL {
			return c.err
		}
	}
	err := v.checkNow(ctx, p, now)
	v.mu.Lock()
	if len(v.checked) > 10_000 {
		for k, c := range v.checked {
			if now.Sub(c.at) >= v.cfg.CacheTTL {
				delete(v.checked, k)
			}
		}
	}
	v.checked[key] = cachedCheck{err: err, at: now}
	v.mu.Unlock()
	return err
}

func (v *Verifier) checkNow(ctx context.Context, p Principal, now time.Time) error {
	who := p.User + " (" + p.UserKey + ")"
	if p.Expires != 0 && now.Unix() >= p.Expires {
		return fmt.Errorf("%w: user %s expired at %s", ErrUnauthenticated, who, time.Unix(p.Expires, 0).UTC().Format(time.RFC3339))
	}
	if !p.Operator {
		t, err := v.tenantOf(ctx, p.Account)
		if err != nil {
			return err
		}
		if t.Suspended {
			return fmt.Errorf("%w: tenant %s is suspended: its users cannot act", ErrUnauthenticated, t.Name)
		}
	}
	if p.Operator && v.cfg.RevokedOperator != nil {
		op, revoked, err := v.cfg.RevokedOperator(ctx, p.UserKey)
		switch {
		case err != nil:
			return fmt.Errorf("%w: cannot read the operator registry to check user %s (%v); retry; nothing was done", ErrUnauthenticated, who, err)
		case revoked:
			when, by := "", ""
			if op.Revoked != nil {
				when = " at " + op.Revoked.UTC().Format(time.RFC3339)
			}
			if op.RevokedBy != "" {
				by = " by " + op.RevokedBy
			}
			return fmt.Errorf("%w: platform operator %s (%s) was revoked%s%s; nothing was done", ErrUnauthenticated, op.Principal(), p.UserKey, when, by)
		}
	}
	ac, err := v.account(ctx, p.Account)
	if err != nil {
		return err
	}
	if ac.Revocations.IsRevoked(p.UserKey, time.Unix(p.IssuedAt, 0)) {
		if ac.Revocations.IsRevoked(jwt.All, time.Unix(p.IssuedAt, 0)) {
			return fmt.Errorf("%w: every user of account %s issued before its suspension is revoked (%s)", ErrUnauthenticated, p.Account, who)
		}
		return fmt.Errorf("%w: user %s is revoked", ErrUnauthenticated, who)
	}
	switch {
	case p.Issuer == p.Account && v.cfg.StrictSigningKeys:
		return fmt.Errorf("%w: user %s is signed by its account's identity key, which this installation does not accept (signing keys only)", ErrUnauthenticated, who)
	case p.Issuer != p.Account && !ac.SigningKeys.Contains(p.Issuer):
		return fmt.Errorf("%w: user %s is signed by %s, which is not a signing key of account %s (removed, or never one)", ErrUnauthenticated, who, p.Issuer, p.Account)
	}
	return nil
}

func (v *Verifier) account(ctx context.Context, account string) (*jwt.AccountClaims, error) {
	now := v.cfg.Now()
	v.mu.Lock()
	c, ok := v.accounts[account]
	v.mu.Unlock()
	if ok && now.Sub(c.at) < v.cfg.CacheTTL {
		return c.ac, c.err
	}
	c = cachedAccount{at: now}
	tok, err := v.cfg.AccountJWT(ctx, account)
	switch {
	case err != nil || tok == "":
		c.err = fmt.Errorf("%w: account %s is unknown to this installation's broker: %v", ErrUnauthenticated, account, err)
	default:
		c.ac, err = jwt.DecodeAccountClaims(tok)
		if err != nil {
			c.err = fmt.Errorf("principal: account %s: %w", account, err)
		} else if c.ac.Subject != account {
			c.err = fmt.Errorf("principal: the resolver returned account %s for %s", c.ac.Subject, account)
		}
	}
	v.mu.Lock()
	v.accounts[account] = c
	v.mu.Unlock()
	return c.ac, c.err
}

func (v *Verifier) tenantOf(ctx context.Context, account string) (Tenant, error) {
	now := v.cfg.Now()
	v.mu.Lock()
	c := v.tenants
	v.mu.Unlock()
	if c.at.IsZero() || now.Sub(c.at) >= v.cfg.CacheTTL {
		c = cachedTenants{at: now, byAccount: map[string]Tenant{}}
		if v.cfg.Tenants != nil {
			ts, err := v.cfg.Tenants(ctx)
			if err != nil {
				return Tenant{}, fmt.Errorf("principal: list tenants: %w", err)
			}
			for _, t := range ts {
				c.byAccount[t.Account] = t
			}
		}
		v.mu.Lock()
		v.tenants = c
		v.mu.Unlock()
	}
	t, ok := c.byAccount[account]
	if !ok {
		return Tenant{}, fmt.Errorf("%w: account %s is neither the platform admin account nor a tenant's", ErrUnauthenticated, account)
	}
	return t, nil
}

// nonceCache remembers (user, nonce) pairs until their request's time
// leaves the skew window. Bounded: when full of live entries it refuses.
type nonceCache struct {
	mu    sync.Mutex
	max   int
	until map[string]time.Time
	order []nonceEntry // insertion order, for pruning
}

type nonceEntry struct {
	key   string
	until time.Time
}

func newNonceCache(max int) *nonceCache {
	return &nonceCache{max: max, until: map[string]time.Time{}}
}

func (n *nonceCache) add(key string, until, now time.Time) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if exp, ok := n.until[key]; ok && now.Before(exp) {
		return fmt.Errorf("%w: this signed request was already received (replayed nonce); nothing was done", ErrUnauthenticated)
	}
	if len(n.until) >= n.max {
		n.prune(now)
	}
	if len(n.until) >= n.max {
		return fmt.Errorf("%w: too many signed requests in the last minutes (%d remembered for replay protection); retry shortly", ErrUnauthenticated, n.max)
	}
	n.until[key] = until
	n.order = append(n.order, nonceEntry{key, until})
	if len(n.order) > 2*n.max {
		n.prune(now)
	}
	return nil
}

// prune forgets expired entries. Callers hold n.mu.
func (n *nonceCache) prune(now time.Time) {
	kept := n.order[:0]
	for _, e := range n.order {
		if now.Before(e.until) {
			kept = append(kept, e)
			continue
		}
		if n.until[e.key] == e.until {
			delete(n.until, e.key)
		}
	}
	n.order = kept
}
