package tenancy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Tenant roles a user may be granted (Manager.SetUserRoles, platformctl
// user role) for dead-letter review and redrive in its tenant, on top of
// what its permissions (--pub, --sub) allow:
//
//   - RoleViewer sees every DLQ of the tenant (entries, payloads,
//     headers, groups) and every redrive request and its history; it
//     acts on none by that alone.
//   - RoleApprover is a viewer that also approves or rejects any request
//     (never its own on a review: required topic).
//   - RoleOperator is a viewer that also files, runs, pauses, resumes and
//     cancels redrives of any DLQ into any topic or queue of the tenant,
//     at most at the tenant's publish-rate quota.
//
// A user with no role sees and acts on the DLQs of what it may consume,
// and redrives into what it may publish to (redrive.Access).
const (
	RoleViewer   = "viewer"
	RoleApprover = "approver"
	RoleOperator = "operator"
)

// Roles lists every role.
var Roles = []string{RoleViewer, RoleApprover, RoleOperator}

// SubjUserRole is the control API subject of SetUserRoles.
const SubjUserRole = "user.role"

// RoleRequest grants (Add) and withdraws (Remove) roles of a user.
type RoleRequest struct {
	Actor  string   `json:"actor"`
	Tenant string   `json:"tenant"`
	User   string   `json:"user"`
	Add    []string `json:"add,omitempty"`
	Remove []string `json:"remove,omitempty"`
}

// Validate reports every problem with the request.
func (r RoleRequest) Validate() error {
	var bad []string
	for _, n := range append(slices.Clone(r.Add), r.Remove...) {
		if !slices.Contains(Roles, n) {
			bad = append(bad, fmt.Sprintf("%q", n))
		}
	}
	switch {
	case len(r.Add)+len(r.Remove) == 0:
		return fmt.Errorf("%w: give a role to --add or --remove (%s)", ErrInvalid, strings.Join(Roles, ", "))
	case len(bad) > 0:
		return fmt.Errorf("%w: unknown role %s: the roles are %s", ErrInvalid, strings.Join(bad, ", "), strings.Join(Roles, ", "))
	}
	for _, n := range r.Add {
		if slices.Contains(r.Remove, n) {
			return fmt.Errorf("%w: role %s is both added and removed", ErrInvalid, n)
		}
	}
	return nil
}

// SetUserRoles adds and removes roles of a user of tenant, recorded with
// the user in the registry and audited (action user.role, the tenant
// before and after). The user's credentials and NATS permissions do not
// change: roles are the platform's (redrive review), not the broker's.
func (m *Manager) SetUserRoles(ctx context.Context, actor string, r RoleRequest) (User, error) {
	if err := ValidateName("user", r.User); err != nil {
		return User{}, err
	}
	if err := r.Validate(); err != nil {
		return User{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out User
	_, err := m.change(ctx, actor, "user.role", r.Tenant, false, func(t *Tenant) (string, error) {
		u, err := t.liveUser(r.User)
		if err != nil {
			return "", err
		}
		roles := slices.DeleteFunc(slices.Clone(u.Roles), func(n string) bool { return slices.Contains(r.Remove, n) })
		for _, n := range r.Add {
			if !slices.Contains(roles, n) {
				roles = append(roles, n)
			}
		}
		slices.Sort(roles)
		if slices.Equal(roles, u.Roles) {
			out = u
			return "", errUnchanged
		}
		u.Roles = roles
		if len(roles) == 0 {
			u.Roles = nil
		}
		t.Users[r.User] = u
		out = u
		return r.User, nil
	})
	if errors.Is(err, errUnchanged) {
		return out, nil
	}
	return out, err
}

// liveUser returns the tenant's user name: ErrNotFound when it has none,
// ErrConflict when it was revoked.
func (t *Tenant) liveUser(name string) (User, error) {
	u, ok := t.Users[name]
	switch {
	case !ok:
		return User{}, fmt.Errorf("%w: tenant %s has no user %q", ErrNotFound, t.Name, name)
	case u.Revoked != nil:
		return User{}, fmt.Errorf("%w: user %s of %s was revoked at %s", ErrConflict, name, t.Name, u.Revoked.Format(time.RFC3339))
	}
	return u, nil
}
