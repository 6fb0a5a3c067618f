package tenancy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats"
)

// Create makes a tenant: a new account signed by the operator signing
// key, pushed to every node, recorded in the registry, its ingest started.
func (m *Manager) Create(ctx context.Context, actor string, spec Spec) (Tenant, error) {
	if err := spec.Validate(); err != nil {
		return Tenant{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(); err != nil {
		return Tenant{}, err
	}
	if _, err := m.reg.get(ctx, spec.Name); err == nil {
		return Tenant{}, fmt.Errorf("%w: tenant %q exists", ErrConflict, spec.Name)
	} else if !errors.Is(err, ErrNotFound) {
		return Tenant{}, err
	}
	now := time.Now().UTC()
	t := &Tenant{Spec: spec, State: StateActive, Created: now, Updated: now,
		Topics: map[string]int{}, Queues: map[string]bool{}, Groups: map[string]string{}, Users: map[string]User{}, Revoked: map[string]int64{}}
	if err := m.newAccount(t); err != nil {
		return Tenant{}, err
	}
	tok, err := m.accountJWT(t)
	if err != nil {
		return Tenant{}, err
	}
	if err := m.push(ctx, tok); err != nil {
		return Tenant{}, err
	}
	if err := m.reg.create(ctx, t); err != nil {
		return Tenant{}, err
	}
	m.accounts[t.Account] = t.Name
	m.index(t)
	_ = m.appendAudit(ctx, Record{Actor: actor, Action: "tenant.create", Tenant: t.Name, After: t.Public()})
	if err := m.startRuntime(ctx, t); err != nil {
		return t.Public(), err
	}
	return t.Public(), nil
}

// EnsureDeclared creates each declared tenant that does not exist yet.
// Existing tenants are left as they are (their quota may have been
// changed with `tenant update` since).
func (m *Manager) EnsureDeclared(ctx context.Context, specs map[string]Spec) error {
	for _, name := range slices.Sorted(maps.Keys(specs)) {
		_, err := m.Create(ctx, "platformd (declared in configuration)", specs[name])
		if err != nil && !errors.Is(err, ErrConflict) {
			return fmt.Errorf("tenancy: declared tenant %s: %w", name, err)
		}
	}
	return nil
}

// List returns every tenant, without secrets.
func (m *Manager) List(ctx context.Context) ([]Tenant, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	ts, err := m.reg.list(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Tenant, len(ts))
	for i, t := range ts {
		out[i] = t.Public()
	}
	return out, nil
}

// Get returns one tenant, without secrets.
func (m *Manager) Get(ctx context.Context, name string) (Tenant, error) {
	if err := ValidateName("tenant", name); err != nil {
		return Tenant{}, err
	}
	if err := m.check(); err != nil {
		return Tenant{}, err
	}
	t, err := m.reg.get(ctx, name)
	if err != nil {
		return Tenant{}, err
	}
	return t.Public(), nil
}

// change loads tenant name, lets fn modify it, pushes its new account JWT
// (if push), saves it and appends an audit record with the record before
// and after. If fn, the push or the save fails, the registry is
// unchanged. Callers hold m.mu.
func (m *Manager) change(ctx context.Context, actor, action, name string, push bool, fn func(t *Tenant) (target string, err error)) (*Tenant, error) {
	if err := ValidateName("tenant", name); err != nil {
		return nil, err
	}
	if err := m.check(); err != nil {
		return nil, err
	}
	t, err := m.reg.get(ctx, name)
	if err != nil {
		return nil, err
	}
	before := clone(t)
	target, err := fn(t)
	if err != nil {
		return nil, err
	}
	t.Updated = time.Now().UTC()
	if push {
		tok, err := m.accountJWT(t)
		if err != nil {
			return nil, err
		}
		if err := m.push(ctx, tok); err != nil {
			return nil, err
		}
	}
	if err := m.reg.update(ctx, t); err != nil {
		if push { // put the cluster back to what the registry says
			if tok, jerr := m.accountJWT(before); jerr == nil {
				_ = m.push(ctx, tok)
			}
		}
		return nil, err
	}
	_ = m.appendAudit(ctx, Record{Actor: actor, Action: action, Tenant: name, Target: target, Before: before.Public(), After: t.Public()})
	return t, nil
}

func clone(t *Tenant) *Tenant {
	b, _ := json.Marshal(t)
	var c Tenant
	_ = json.Unmarshal(b, &c)
	c.revision = t.revision
	return &c
}

// Update replaces a tenant's quota; limits enforced by the servers change
// on live connections (the account JWT is pushed), the publish rate on
// the next event. A quota equal to the current one changes nothing and
// is not audited.
func (m *Manager) Update(ctx context.Context, actor, name string, q Quota) (Tenant, error) {
	if err := q.Validate(); err != nil {
		return Tenant{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changeThen(ctx, actor, "tenant.update", name, func(t *Tenant) (string, error) {
		if t.Quota == q {
			return "", errUnchanged // nothing to push or audit
		}
		t.Quota = q
		return "quota", nil
	}, func(*Tenant) error {
		if rt := m.rts[name]; rt != nil {
			rt.in.setQuota(q)
		}
		return nil
	})
}

// changeThen changes tenant name as change does (pushing its account
// JWT), then runs after on the changed tenant and returns it with after's
// error. A tenant fn leaves as it was (errUnchanged) is returned as
// stored: nothing pushed, audited or run after.
func (m *Manager) changeThen(ctx context.Context, actor, action, name string, fn func(t *Tenant) (string, error), after func(t *Tenant) error) (Tenant, error) {
	t, err := m.change(ctx, actor, action, name, true, fn)
	if errors.Is(err, errUnchanged) {
		return m.Get(ctx, name)
	}
	if err != nil {
		return Tenant{}, err
	}
	err = after(t)
	return t.Public(), err
}

// Suspend drops and refuses every connection of the tenant (all its users
// are revoked as of now and its connection limit is 0) and stops its
// ingest. Its streams, users and quota are kept. Suspending a suspended
// tenant changes nothing.
func (m *Manager) Suspend(ctx context.Context, actor, name string) (Tenant, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changeThen(ctx, actor, "tenant.suspend", name, func(t *Tenant) (string, error) {
		if t.State == StateSuspended {
			return "", errUnchanged
		}
		now := time.Now().UTC()
		t.State, t.Suspended = StateSuspended, &now
		return "", nil
	}, func(*Tenant) error {
		m.stopRuntime(name)
		return nil
	})
}

// Resume undoes Suspend: users not revoked individually can connect
// again, and the ingest restarts.
func (m *Manager) Resume(ctx context.Context, actor, name string) (Tenant, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changeThen(ctx, actor, "tenant.resume", name, func(t *Tenant) (string, error) {
		if t.State == StateActive {
			return "", errUnchanged
		}
		t.State, t.Suspended = StateActive, nil
		return "", nil
	}, func(t *Tenant) error {
		if err := m.startRuntime(ctx, t); err != nil {
			return err
		}
		return m.waitServing(ctx, t)
	})
}

// ServingTimeout bounds how long Resume waits for the tenant's ingest to
// take publishes on every node.
const ServingTimeout = 10 * time.Second

// waitServing returns once a probe sent through every node this manager
// connects to (Config.URL) is answered by the tenant's active ingest,
// whichever manager holds its lease: a publish made after it returns is
// taken, not left without responders. Bounded by ServingTimeout; callers
// hold m.mu (the heartbeat cannot run meanwhile, so the lease stays where
// startRuntime put it unless another daemon holds it).
func (m *Manager) waitServing(ctx context.Context, t *Tenant) error {
	ctx, cancel := context.WithTimeout(ctx, ServingTimeout)
	defer cancel()
	token, seed, _, err := m.userJWT(t, "platform-probe", jwt.Permissions{})
	if err != nil {
		return err
	}
	for _, url := range strings.Split(m.cfg.URL, ",") {
		if err := probeIngest(ctx, m.trust, url, token, seed); err != nil {
			return fmt.Errorf("tenancy: tenant %s resumed, but its ingest is not serving through %s within %s: %w", t.Name, url, ServingTimeout, err)
		}
	}
	return nil
}

// probeIngest connects to one node as a platform user of the tenant and
// retries the probe until the ingest answers or ctx ends.
func probeIngest(ctx context.Context, trust *embeddednats.Trust, url, token string, seed []byte) error {
	var nc *nats.Conn
	err := retryUntil(ctx, func() (err error) {
		nc, err = embeddednats.Connect(trust, url, nats.UserJWTAndSeed(token, string(seed)), nats.Name("platform-ingest-probe"),
			nats.NoReconnect(), nats.Timeout(2*time.Second))
		return err
	})
	if err != nil {
		return err
	}
	defer nc.Close()
	return retryUntil(ctx, func() error {
		_, err := nc.Request(probeSubject, nil, 250*time.Millisecond)
		return err
	})
}

// retryUntil calls fn every 50 ms until it succeeds or ctx ends.
func retryUntil(ctx context.Context, fn func() error) error {
	for {
		err := fn()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

var errUnchanged = errors.New("unchanged")

// Delete removes a tenant. While it has topics or queues it refuses unless
// purge, which deletes them (and their data) first; a suspended tenant's
// through the system account (see purgeAccount), so it need not be
// resumed, letting its users back in, to be deleted. The shares it takes
// part in, as owner or reader, end (see dropShares). The account is left
// in the resolvers revoked and with no connections allowed.
func (m *Manager) Delete(ctx context.Context, actor, name string, purge bool) error {
	if err := ValidateName("tenant", name); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(); err != nil {
		return err
	}
	t, err := m.reg.get(ctx, name)
	if err != nil {
		return err
	}
	objects := len(t.Topics) + len(t.Queues)
	if objects > 0 && !purge {
		return fmt.Errorf("%w: tenant %s has %d topic(s) and queue(s) with their data (%v %v); delete refuses to lose data: pass --purge to delete them too",
			ErrConflict, name, objects, slices.Sorted(maps.Keys(t.Topics)), slices.Sorted(maps.Keys(t.Queues)))
	}
	if objects > 0 {
		rt, err := m.runtimeOf(t)
		switch {
		case err == nil:
			for _, n := range append(slices.Sorted(maps.Keys(t.Topics)), slices.Sorted(maps.Keys(t.Queues))...) {
				if err := rt.js.DeleteStream(ctx, StreamName(n)); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
					return fmt.Errorf("tenancy: purge %s of %s: %w", n, name, err)
				}
			}
		case t.State == StateSuspended:
			// No connection may enter a suspended tenant's account (and
			// resuming it to purge would let its users back in).
			if err := m.purgeAccount(ctx, t); err != nil {
				return fmt.Errorf("tenancy: purge the data of suspended tenant %s: %w", name, err)
			}
		default:
			return fmt.Errorf("%w (to purge its data)", err)
		}
	}
	if err := m.dropShares(ctx, actor, t); err != nil {
		return err
	}
	m.stopRuntime(name)
	dead := clone(t)
	now := time.Now().UTC()
	dead.State, dead.Suspended = StateSuspended, &now
	dead.Quota.Connections = 0
	dead.Imports, dead.Exports = nil, nil
	if tok, err := m.accountJWT(dead); err == nil {
		if err := m.push(ctx, tok); err != nil {
			return err
		}
	}
	if err := m.reg.delete(ctx, t); err != nil {
		return err
	}
	delete(m.accounts, t.Account)
	_ = m.appendAudit(ctx, Record{Actor: actor, Action: "tenant.delete", Tenant: name, Before: t.Public(), Detail: fmt.Sprintf("purge=%v", purge)})
	return nil
}

// purgeAccount deletes every stream of t's account (its topics, queues,
// DLQs and the consumers on them) through the system account, with
// JetStream's account purge (the meta leader proposes each stream's
// removal), and returns once no server holds a replica of them (a server
// silent for ten seconds is taken to be down).
// For a suspended tenant, whose account no connection may enter.
func (m *Manager) purgeAccount(ctx context.Context, t *Tenant) error {
	if m.sys == nil {
		return errors.New("no system account connection")
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := tryUntil(ctx, func(ctx context.Context) error {
		msg, err := m.sys.RequestWithContext(ctx, fmt.Sprintf(server.JSApiAccountPurgeT, t.Account), nil)
		if err != nil {
			return err
		}
		var r server.JSApiAccountPurgeResponse
		if err := json.Unmarshal(msg.Data, &r); err != nil {
			return fmt.Errorf("undecodable reply: %w", err)
		}
		if r.Error != nil {
			return r.Error
		}
		if !r.Initiated {
			return errors.New("the purge was not initiated")
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Every replica is gone from every server before it returns; a node
	// that does not answer for downDelay is taken to be down: it holds its
	// replicas until it is back, and deletes them then (the meta leader
	// has removed the streams).
	const downDelay = 10 * time.Second
	purged := time.Now()
	return tryUntil(ctx, func(ctx context.Context) error {
		left, answered, err := m.replicasOnServers(ctx, t.Account)
		if err != nil {
			return err
		}
		switch {
		case answered == 0:
			return errors.New("no server answered")
		case left > 0:
			return fmt.Errorf("%d stream replica(s) left", left)
		case answered < m.cfg.Servers && time.Since(purged) < downDelay:
			return fmt.Errorf("%d of %d servers answered", answered, m.cfg.Servers)
		}
		return nil
	})
}

// dropShares ends every share t takes part in before t is deleted: the
// readers of t's topics lose their imports (first, so the flow stops),
// then the owners of the topics t reads stop listing it. Each is a
// share.revoke audited under the other tenant; a tenant already gone is
// skipped. Otherwise the shares would stay listed, pointing at a dead
// account, and a tenant later created with t's name would show them
// without getting them. Callers hold m.mu.
func (m *Manager) dropShares(ctx context.Context, actor string, t *Tenant) error {
	for _, topic := range slices.Sorted(maps.Keys(t.Exports)) {
		for _, reader := range t.Exports[topic] {
			_, err := m.change(ctx, actor, "share.revoke", reader, true, func(r *Tenant) (string, error) {
				n := len(r.Imports)
				r.Imports = slices.DeleteFunc(r.Imports, func(s Share) bool { return s.From == t.Name && s.Topic == topic })
				if len(r.Imports) == n {
					return "", errUnchanged
				}
				return reader + ":" + topic, nil
			})
			if err != nil && !errors.Is(err, errUnchanged) && !errors.Is(err, ErrNotFound) {
				return fmt.Errorf("tenancy: delete %s: end the share of topic %s with %s: %w", t.Name, topic, reader, err)
			}
		}
	}
	for _, s := range t.Imports {
		_, err := m.change(ctx, actor, "share.revoke", s.From, true, func(o *Tenant) (string, error) {
			readers := o.Exports[s.Topic]
			n := len(readers)
			if readers = slices.DeleteFunc(readers, func(r string) bool { return r == t.Name }); len(readers) == n {
				return "", errUnchanged
			}
			if len(readers) == 0 {
				delete(o.Exports, s.Topic)
			} else {
				o.Exports[s.Topic] = readers
			}
			return t.Name + ":" + s.Topic, nil
		})
		if err != nil && !errors.Is(err, errUnchanged) && !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("tenancy: delete %s: end its share of topic %s of %s: %w", t.Name, s.Topic, s.From, err)
		}
	}
	return nil
}

// check refuses a user spec with a malformed name or no permission at
// all (ErrInvalid).
func (u UserSpec) check() error {
	if err := ValidateName("user", u.Name); err != nil {
		return err
	}
	if len(u.Pub)+len(u.Sub) == 0 {
		return fmt.Errorf("%w: user %s: give at least one --pub or --sub", ErrInvalid, u.Name)
	}
	return nil
}

// UserCreds is a new user and its credentials (shown once, never stored).
type UserCreds struct {
	User  User   `json:"user"`
	Creds []byte `json:"creds"`
}

// AddUser issues a user of tenant with permissions on the named topics,
// queues and groups, and returns its .creds (jwt.FormatUserConfig).
func (m *Manager) AddUser(ctx context.Context, actor, tenant string, u UserSpec) (UserCreds, error) {
	if err := u.check(); err != nil {
		return UserCreds{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out UserCreds
	t, err := m.change(ctx, actor, "user.add", tenant, true, func(t *Tenant) (string, error) {
		if t.State != StateActive {
			return "", fmt.Errorf("%w: tenant %s is %s; resume it first", ErrConflict, t.Name, t.State)
		}
		if old, ok := t.Users[u.Name]; ok && old.Revoked == nil {
			return "", fmt.Errorf("%w: tenant %s already has user %s (revoke it first)", ErrConflict, t.Name, u.Name)
		}
		if _, err := permissions(t, u); err != nil {
			return "", err
		}
		token, seed, pub, scopeKey, err := scopedUserJWT(t, u.Name)
		if err != nil {
			return "", err
		}
		creds, err := jwt.FormatUserConfig(token, seed)
		if err != nil {
			return "", err
		}
		user := User{Name: u.Name, PublicKey: pub, Pub: slices.Clone(u.Pub), Sub: slices.Clone(u.Sub), Created: time.Now().UTC(), ScopeKey: scopeKey}
		if t.Users == nil {
			t.Users = map[string]User{}
		}
		t.Users[u.Name] = user
		out = UserCreds{User: user, Creds: creds}
		return u.Name, nil
	})
	if err == nil {
		m.index(t)
	}
	return out, err
}

// UpdateUser replaces a user's permissions with those of u (u.Pub and
// u.Sub name topics, queues and groups as for AddUser). The user keeps
// its credentials: its permissions are the template of its scoped
// signing key in the account JWT, which is pushed. nats-server (2.15)
// cannot change the permissions of a live JWT connection in place: on the
// push it closes the user's live connections, and clients reconnect by
// themselves (nats.go, the nats CLI) with the same .creds and get the new
// permissions. The audit record holds the tenant before and after.
func (m *Manager) UpdateUser(ctx context.Context, actor, tenant string, u UserSpec) (User, error) {
	if err := u.check(); err != nil {
		return User{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out User
	t, err := m.change(ctx, actor, "user.update", tenant, true, func(t *Tenant) (string, error) {
		old, err := t.liveUser(u.Name)
		switch {
		case err != nil:
			return "", err
		case old.ScopeKey == "":
			return "", fmt.Errorf("%w: user %s of %s was issued with its permissions in its credentials (before live permission changes); revoke it and add it again", ErrConflict, u.Name, t.Name)
		}
		if _, err := permissions(t, u); err != nil {
			return "", err
		}
		old.Pub, old.Sub = slices.Clone(u.Pub), slices.Clone(u.Sub)
		t.Users[u.Name] = old
		out = old
		return u.Name, nil
	})
	if err == nil {
		m.settleScope(ctx, t, u.Name)
	}
	return out, err
}

// settleScope closes a user's connections once more after a permission
// change has reached every server. A server closes the connections of a
// user whose scope changed when it applies the account update, but one
// that reconnected there a moment before, still authenticating while the
// update was applied, is not among the connections it closes: it keeps
// the old permissions until it next reconnects (seen in tests under
// load). So the account JWT is pushed twice more: with the user's scope
// marked (an altered scope again: every server, all of which now hold the
// new permissions, closes the user's connections), then as the registry
// has it (once more). Best effort: the change itself is already made.
func (m *Manager) settleScope(ctx context.Context, t *Tenant, user string) {
	marked := clone(t)
	marked.settling = user
	for _, v := range []*Tenant{marked, t} {
		tok, err := m.accountJWT(v)
		if err != nil {
			return
		}
		if err := m.push(ctx, tok); err != nil {
			m.log.Warn("tenancy: settling a user's permission change", "tenant", t.Name, "user", user, "error", err)
			return
		}
	}
}

// ListUsers returns a tenant's users.
func (m *Manager) ListUsers(ctx context.Context, tenant string) ([]User, error) {
	t, err := m.Get(ctx, tenant)
	if err != nil {
		return nil, err
	}
	out := make([]User, 0, len(t.Users))
	for _, k := range slices.Sorted(maps.Keys(t.Users)) {
		out = append(out, t.Users[k])
	}
	return out, nil
}

// RevokeUser revokes a user as of now: the account JWT with the
// revocation is pushed, the servers drop its live connections, and it
// cannot connect again.
func (m *Manager) RevokeUser(ctx context.Context, actor, tenant, user string) (User, error) {
	if err := ValidateName("user", user); err != nil {
		return User{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out User
	_, err := m.change(ctx, actor, "user.revoke", tenant, true, func(t *Tenant) (string, error) {
		u, ok := t.Users[user]
		if !ok {
			return "", fmt.Errorf("%w: tenant %s has no user %q", ErrNotFound, t.Name, user)
		}
		if u.Revoked != nil {
			return "", fmt.Errorf("%w: user %s of %s was already revoked at %s", ErrConflict, user, t.Name, u.Revoked.Format(time.RFC3339))
		}
		now := time.Now().UTC()
		u.Revoked = &now
		t.Users[user] = u
		if t.Revoked == nil {
			t.Revoked = map[string]int64{}
		}
		t.Revoked[u.PublicKey] = now.Unix()
		out = u
		return user, nil
	})
	return out, err
}
