package daemon

import (
	"context"
	"fmt"

	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/principal"
	"github.com/msgplatform/platform/redrive"
	"github.com/msgplatform/platform/tenancy"
)

// RedriveAccess is what p may do with the DLQs and redrives of its
// tenant (redrive.Access), from the tenant's user record as it is now
// (tenancy: the user whose public key p authenticated with, its --sub and
// --pub names, its tenant roles, the tenant's publish-rate quota). nil (an unsigned control
// request, whose sender holds the platform admin credentials) and a
// platform operator may do everything. A tenant's user the registry does
// not list (revoked, or one of the platform's own service users) may do
// nothing.
func (d *Daemon) RedriveAccess(ctx context.Context, p *principal.Principal) (redrive.Access, error) {
	switch {
	case p == nil:
		return redrive.FullAccess(""), nil
	case p.Operator:
		return redrive.FullAccess(p.Name()), nil
	case d.tenants == nil:
		return redrive.Access{Principal: p.Name(), Tenant: p.Tenant}, nil
	}
	t, err := d.tenants.Get(ctx, p.Tenant)
	if err != nil {
		return redrive.Access{}, fmt.Errorf("daemon: permissions of %s: %w", p.Name(), err)
	}
	a := redrive.Access{Principal: p.Name(), Tenant: t.Name, MaxRate: float64(t.Quota.PublishRate),
		Consume: map[string]bool{}, ConsumeGroups: map[string]string{}, Publish: map[string]string{}}
	for _, u := range t.Users {
		if u.PublicKey != p.UserKey || u.Revoked != nil {
			continue
		}
		for _, n := range u.Sub {
			switch {
			case t.Topics[n] > 0, t.Queues[n]:
				a.Consume[n] = true
			case t.Groups[n] != "":
				a.ConsumeGroups[n] = t.Groups[n]
			}
		}
		for _, n := range u.Pub {
			switch {
			case t.Topics[n] > 0:
				a.Publish[n] = "topic"
			case t.Queues[n]:
				a.Publish[n] = "queue"
			}
		}
		for _, r := range u.Roles {
			switch r {
			case tenancy.RoleViewer:
				a.Viewer = true
			case tenancy.RoleApprover:
				a.Viewer, a.Approver = true, true
			case tenancy.RoleOperator:
				a.Viewer, a.Operator = true, true
				for n := range t.Topics {
					a.Publish[n] = "topic"
				}
				for n := range t.Queues {
					a.Publish[n] = "queue"
				}
			}
		}
	}
	return a, nil
}

// redriveGuard is the redrive service of scope as c may use it: c may act
// in scope (its own tenant), and every operation is decided by its
// RedriveAccess.
func (d *Daemon) redriveGuard(ctx context.Context, c caller, scope string) (*redrive.Guard, error) {
	if err := c.mayAct(scope); err != nil {
		return nil, err
	}
	s, err := d.RedriveFor(ctx, scope)
	if err != nil {
		return nil, err
	}
	a, err := d.RedriveAccess(ctx, c.p)
	if err != nil {
		return nil, err
	}
	return s.For(a), nil
}

// guardedRep is an endpoint on the redrive service of the request's
// scope as its caller may use it (signed or not; see signedRep).
func guardedRep[Req, Resp any](d *Daemon, v *principal.Verifier, name, subject string, scope func(Req) string,
	fn func(ctx context.Context, g *redrive.Guard, c caller, req Req) (Resp, error)) control.Endpoint {
	return signedRep(v, name, subject, func(ctx context.Context, c caller, r Req) (Resp, error) {
		g, err := d.redriveGuard(ctx, c, scope(r))
		if err != nil {
			var zero Resp
			return zero, err
		}
		return fn(ctx, g, c, r)
	})
}

// roleEndpoints grant and withdraw tenant roles (tenancy.SetUserRoles).
// A signed request is recorded as its principal and must come from a
// platform operator: a tenant's user never grants roles, not even in its
// own tenant. An unsigned one (the admin credentials) is recorded as the
// actor it names, as the other user operations are.
func (d *Daemon) roleEndpoints(v *principal.Verifier) []control.Endpoint {
	m := d.tenants
	if m == nil {
		return nil
	}
	return []control.Endpoint{
		signedRep(v, "user_role", tenancy.SubjUserRole, func(ctx context.Context, c caller, r tenancy.RoleRequest) (tenancy.User, error) {
			if c.p != nil && !c.p.Operator {
				return tenancy.User{}, refused{fmt.Errorf("%w: forbidden: %s is a user of tenant %s: only a platform operator grants tenant roles; nothing was changed",
					principal.ErrUnauthenticated, c.p.Name(), c.p.Tenant)}
			}
			actor := r.Actor
			if c.p != nil {
				actor = c.p.Name()
			}
			u, err := m.SetUserRoles(ctx, actor, r)
			return u, tenancyErr(err)
		}),
	}
}
