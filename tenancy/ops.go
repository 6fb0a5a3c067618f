package tenancy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go/jetstream"
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
	for _, name := range sortedKeys(specs) {
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
// the next event.
func (m *Manager) Update(ctx context.Context, actor, name string, q Quota) (Tenant, error) {
	if err := q.Validate(); err != nil {
		return Tenant{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	t, err := m.change(ctx, actor, "tenant.update", name, true, func(t *Tenant) (string, error) {
		t.Quota = q
		return "quota", nil
	})
	if err != nil {
		return Tenant{}, err
	}
	if rt := m.rts[name]; rt != nil {
		rt.in.setQuota(q)
	}
	return t.Public(), nil
}

// Suspend drops and refuses every connection of the tenant (all its users
// are revoked as of now and its connection limit is 0) and stops its
// ingest. Its streams, users and quota are kept. Suspending a suspended
// tenant changes nothing.
func (m *Manager) Suspend(ctx context.Context, actor, name string) (Tenant, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, err := m.change(ctx, actor, "tenant.suspend", name, true, func(t *Tenant) (string, error) {
		if t.State == StateSuspended {
			return "", errUnchanged
		}
		now := time.Now().UTC()
		t.State, t.Suspended = StateSuspended, &now
		return "", nil
	})
	if errors.Is(err, errUnchanged) {
		return m.Get(ctx, name)
	}
	if err != nil {
		return Tenant{}, err
	}
	m.stopRuntime(name)
	return t.Public(), nil
}

// Resume undoes Suspend: users not revoked individually can connect
// again, and the ingest restarts.
func (m *Manager) Resume(ctx context.Context, actor, name string) (Tenant, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, err := m.change(ctx, actor, "tenant.resume", name, true, func(t *Tenant) (string, error) {
		if t.State == StateActive {
			return "", errUnchanged
		}
		t.State, t.Suspended = StateActive, nil
		return "", nil
	})
	if errors.Is(err, errUnchanged) {
		return m.Get(ctx, name)
	}
	if err != nil {
		return Tenant{}, err
	}
	if err := m.startRuntime(ctx, t); err != nil {
		return t.Public(), err
	}
	return t.Public(), nil
}

var errUnchanged = errors.New("unchanged")

// Delete removes a tenant. While it has topics or queues it refuses unless
// purge, which deletes them (and their data) first. The account is left
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
			ErrConflict, name, objects, sortedKeys(t.Topics), sortedKeys(t.Queues))
	}
	if objects > 0 {
		rt, err := m.runtimeOf(t)
		if err != nil {
			return fmt.Errorf("%w (to purge its data)", err)
		}
		for _, n := range append(sortedKeys(t.Topics), sortedKeys(t.Queues)...) {
			if err := rt.js.DeleteStream(ctx, StreamName(n)); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
				return fmt.Errorf("tenancy: purge %s of %s: %w", n, name, err)
			}
		}
	}
	m.stopRuntime(name)
	dead := clone(t)
	now := time.Now().UTC()
	dead.State, dead.Suspended = StateSuspended, &now
	dead.Quota.Connections = 0
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

// UserCreds is a new user and its credentials (shown once, never stored).
type UserCreds struct {
	User  User   `json:"user"`
	Creds []byte `json:"creds"`
}

// AddUser issues a user of tenant with permissions on the named topics,
// queues and groups, and returns its .creds (jwt.FormatUserConfig).
func (m *Manager) AddUser(ctx context.Context, actor, tenant string, u UserSpec) (UserCreds, error) {
	if err := ValidateName("user", u.Name); err != nil {
		return UserCreds{}, err
	}
	if len(u.Pub)+len(u.Sub) == 0 {
		return UserCreds{}, fmt.Errorf("%w: user %s: give at least one --pub or --sub", ErrInvalid, u.Name)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out UserCreds
	_, err := m.change(ctx, actor, "user.add", tenant, false, func(t *Tenant) (string, error) {
		if t.State != StateActive {
			return "", fmt.Errorf("%w: tenant %s is %s; resume it first", ErrConflict, t.Name, t.State)
		}
		if old, ok := t.Users[u.Name]; ok && old.Revoked == nil {
			return "", fmt.Errorf("%w: tenant %s already has user %s (revoke it first)", ErrConflict, t.Name, u.Name)
		}
		perms, err := permissions(t, u)
		if err != nil {
			return "", err
		}
		token, seed, pub, err := m.userJWT(t, u.Name, perms)
		if err != nil {
			return "", err
		}
		creds, err := jwt.FormatUserConfig(token, seed)
		if err != nil {
			return "", err
		}
		user := User{Name: u.Name, PublicKey: pub, Pub: slices.Clone(u.Pub), Sub: slices.Clone(u.Sub), Created: time.Now().UTC()}
		if t.Users == nil {
			t.Users = map[string]User{}
		}
		t.Users[u.Name] = user
		out = UserCreds{User: user, Creds: creds}
		return u.Name, nil
	})
	return out, err
}

// ListUsers returns a tenant's users.
func (m *Manager) ListUsers(ctx context.Context, tenant string) ([]User, error) {
	t, err := m.Get(ctx, tenant)
	if err != nil {
		return nil, err
	}
	out := make([]User, 0, len(t.Users))
	for _, k := range sortedKeys(t.Users) {
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
