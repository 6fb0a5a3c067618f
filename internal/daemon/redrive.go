package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/principal"
	"github.com/msgplatform/platform/redrive"
	"github.com/msgplatform/platform/tenancy"
)

// startRedrive starts the redrive service of the platform admin account:
// its KV bucket, and the adoption of runs whose runner (another
// platformd, or this one before a restart) went silent. Tenants'
// services start on first use (RedriveFor), and at start for every
// tenant that has used redrive before, so their runs are adopted too.
func (d *Daemon) startRedrive(ctx context.Context) error {
	cfg := redrive.DefaultConfig()
	cfg.Replicas = d.cfg.Durability().Replicas
	cfg.Logger = d.log
	s, err := redrive.New(d.js, cfg)
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	d.redrive = s
	d.redrives = &redriveScopes{d: d, byTenant: map[string]*tenantRedrive{}}
	d.reg.MustRegister(s.Collector())
	d.redrives.startUsed(ctx)
	return nil
}

func (d *Daemon) stopRedrive(ctx context.Context) error {
	var errs []error
	if d.redrives != nil {
		errs = append(errs, d.redrives.close(ctx))
	}
	if d.redrive != nil {
		errs = append(errs, d.redrive.Close(ctx))
	}
	return errors.Join(errs...)
}

// Redrive returns the redrive service of the platform admin account (nil
// before Start).
func (d *Daemon) Redrive() *redrive.Service { return d.redrive }

// RedriveFor returns the redrive service of tenant's account, starting
// it on first use ("" is the platform admin account's). It fails with
// redrive.ErrNotFound for an unknown tenant and redrive.ErrConflict for a
// suspended one.
func (d *Daemon) RedriveFor(ctx context.Context, tenant string) (*redrive.Service, error) {
	if tenant == "" {
		if d.redrive == nil {
			return nil, redrive.ErrClosed
		}
		return d.redrive, nil
	}
	if d.redrives == nil {
		return nil, redrive.ErrClosed
	}
	return d.redrives.get(ctx, tenant)
}

// redriveScopes holds the redrive services of tenant accounts: each over a
// connection of the platform service user platform-svc:redrive of the
// tenant's account (tenancy.Manager.ConnectTenant: signed with the
// tenant's account signing key, unrestricted in that account, not one of
// the tenant's users), with its requests in redrive.TenantBucket(tenant)
// and its audit records in platform-audit, both in the PLATFORM account.
type redriveScopes struct {
	d        *Daemon
	mu       sync.Mutex
	byTenant map[string]*tenantRedrive
	closed   bool
}

type tenantRedrive struct {
	s  *redrive.Service
	nc *nats.Conn
}

func (r *redriveScopes) get(ctx context.Context, tenant string) (*redrive.Service, error) {
	if err := tenancy.ValidateName("tenant", tenant); err != nil {
		return nil, fmt.Errorf("%w: %w", redrive.ErrInvalid, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, redrive.ErrClosed
	}
	if tr := r.byTenant[tenant]; tr != nil {
		if !tr.nc.IsClosed() {
			return tr.s, nil
		}
		// The connection was closed (the tenant was suspended and its
		// users revoked): start over with a fresh user.
		_ = tr.s.Close(ctx)
		delete(r.byTenant, tenant)
	}
	tr, err := r.start(ctx, tenant)
	if err != nil {
		return nil, err
	}
	r.byTenant[tenant] = tr
	return tr.s, nil
}

// start connects a platform service user (tenancy's ConnectTenant) to
// tenant's account and starts its service. Callers hold r.mu.
func (r *redriveScopes) start(ctx context.Context, tenant string) (*tenantRedrive, error) {
	d := r.d
	nc, err := d.ConnectTenant(ctx, tenant, "redrive", nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
	if err != nil {
		return nil, err
	}
	js, err := jetstream.NewWithAPIPrefix(nc, tenancy.APIPrefix)
	if err != nil {
		nc.Close()
		return nil, err
	}
	cfg := redrive.DefaultConfig()
	cfg.Replicas = d.cfg.Durability().Replicas
	cfg.Logger = d.log.With("tenant", tenant)
	cfg.Tenant, cfg.Control, cfg.NamePrefix = tenant, d.js, tenancy.StoredName("")
	cfg.Instance = d.redrive.Instance()
	// The runs' own connection (same user) is a platform connection of
	// the tenant's account too (tenancy.PlatformConnsPerDaemon).
	tm := d.tenants
	cfg.OwnConn = func() func() { return tm.CountServiceConn(tenant) }
	s, err := redrive.New(js, cfg)
	if err != nil {
		nc.Close()
		return nil, err
	}
	if err := s.Start(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	return &tenantRedrive{s: s, nc: nc}, nil
}

// startUsed starts the service of every active tenant that has a redrive
// bucket, so a run left by a stopped daemon is adopted. Failures are
// logged: the tenant's service starts again on first use.
func (r *redriveScopes) startUsed(ctx context.Context) {
	if r.d.tenants == nil {
		return
	}
	ts, err := r.d.tenants.List(ctx)
	if err != nil {
		return
	}
	for _, t := range ts {
		if t.State != tenancy.StateActive {
			continue
		}
		if _, err := r.d.js.KeyValue(ctx, redrive.TenantBucket(t.Name)); err != nil {
			continue
		}
		if _, err := r.get(ctx, t.Name); err != nil {
			r.d.log.Warn("platformd: tenant redrive service not started", "tenant", t.Name, "err", err)
		}
	}
}

func (r *redriveScopes) close(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	var errs []error
	for name, tr := range r.byTenant {
		errs = append(errs, tr.s.Close(ctx))
		tr.nc.Close()
		delete(r.byTenant, name)
	}
	return errors.Join(errs...)
}

// ConnectTenant connects as the platform service user
// tenancy.ServiceUserName(name) of tenant's account (unrestricted inside
// that account, not one of the tenant's users; see
// tenancy.Manager.ConnectTenant). The tenant redrive services use it;
// tests use it to prepare a tenant's data. Errors carry redrive's kinds:
// ErrNotFound for an unknown tenant, ErrConflict for a suspended one,
// ErrInvalid for a malformed name.
func (d *Daemon) ConnectTenant(ctx context.Context, tenant, name string, opts ...nats.Option) (*nats.Conn, error) {
	if d.tenants == nil {
		return nil, redrive.ErrClosed
	}
	nc, err := d.tenants.ConnectTenant(ctx, tenant, name, opts...)
	switch {
	case err == nil:
		return nc, nil
	case errors.Is(err, tenancy.ErrNotFound):
		return nil, fmt.Errorf("%w: %w", redrive.ErrNotFound, err)
	case errors.Is(err, tenancy.ErrConflict):
		return nil, fmt.Errorf("%w: %w", redrive.ErrConflict, err)
	case errors.Is(err, tenancy.ErrInvalid):
		return nil, fmt.Errorf("%w: %w", redrive.ErrInvalid, err)
	}
	return nil, err
}

// redriveErr maps redrive errors onto the control API's kinds. A
// four-eyes refusal is a 409 (refused, nothing changed) with its message.
func redriveErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, redrive.ErrInvalid):
		return fmt.Errorf("%w: %w", control.ErrInvalid, err)
	case errors.Is(err, redrive.ErrNotFound):
		return fmt.Errorf("%w: %w", control.ErrNotFound, err)
	case errors.Is(err, redrive.ErrConflict), errors.Is(err, redrive.ErrForbidden):
		return refused{err}
	}
	return err
}

// rep is mappedEP with redrive's error kinds.
func rep[Req, Resp any](name, subject string, fn func(ctx context.Context, req Req) (Resp, error)) control.Endpoint {
	return mappedEP(name, subject, redriveErr, fn)
}

// redriveEndpoints are the DLQ browse and redrive operations. Each
// request's scope selects the platform admin account ("") or a tenant's.
// The state-changing ones take a signed request (internal/principal, v
// verifies it): its principal is the requester or actor, and a tenant's
// user may act in its tenant's scope only. An unsigned request is
// recorded as unauthenticated:<name> and may not request, approve, run
// or resume a redrive of a review: required DLQ: four eyes needs two
// authenticated principals.
func (d *Daemon) redriveEndpoints(v *principal.Verifier) []control.Endpoint {
	if d.redrive == nil {
		return nil
	}
	// guarded: approve, run and resume of a review: required DLQ need an
	// authenticated caller; an approval also an authenticated requester.
	guarded := map[string]string{redrive.SubjApprove: "approving", redrive.SubjRun: "running", redrive.SubjResume: "resuming"}
	action := func(name, subject string, fn func(g *redrive.Guard, ctx context.Context, id, actor, note string) (redrive.Status, error)) control.Endpoint {
		return guardedRep(d, v, name, subject, func(r redrive.Action) string { return r.Scope },
			func(ctx context.Context, g *redrive.Guard, c caller, r redrive.Action) (redrive.Status, error) {
				if verb, ok := guarded[subject]; ok {
					if err := reviewGuard(ctx, g.Service(), c, r.ID, verb, subject == redrive.SubjApprove); err != nil {
						return redrive.Status{}, err
					}
				}
				return fn(g, ctx, r.ID, c.name(r.Actor), r.Note)
			})
	}
	return []control.Endpoint{
		guardedRep(d, v, "dlq_list", redrive.SubjDLQList, func(r redrive.ScopeRequest) string { return r.Scope },
			func(ctx context.Context, g *redrive.Guard, _ caller, _ redrive.ScopeRequest) ([]redrive.DLQ, error) {
				return g.ListDLQs(ctx)
			}),
		guardedRep(d, v, "dlq_entries", redrive.SubjDLQEntries, func(r redrive.EntryFilter) string { return r.Scope },
			func(ctx context.Context, g *redrive.Guard, _ caller, f redrive.EntryFilter) ([]redrive.Entry, error) {
				return g.Entries(ctx, f)
			}),
		guardedRep(d, v, "dlq_show", redrive.SubjDLQShow, func(r redrive.ShowRequest) string { return r.Scope },
			func(ctx context.Context, g *redrive.Guard, _ caller, r redrive.ShowRequest) (redrive.Entry, error) {
				return g.Show(ctx, r.DLQ, r.Seq)
			}),
		guardedRep(d, v, "dlq_groups", redrive.SubjDLQGroups, func(r redrive.EntryFilter) string { return r.Scope },
			func(ctx context.Context, g *redrive.Guard, _ caller, f redrive.EntryFilter) ([]redrive.Group, error) {
				return g.Groups(ctx, f)
			}),
		guardedRep(d, v, "redrive_preview", redrive.SubjPreview, func(r redrive.Request) string { return r.Scope },
			func(ctx context.Context, g *redrive.Guard, _ caller, r redrive.Request) (redrive.Preview, error) {
				return g.Preview(ctx, r)
			}),
		guardedRep(d, v, "redrive_request", redrive.SubjRequest, func(r redrive.Request) string { return r.Scope },
			func(ctx context.Context, g *redrive.Guard, c caller, r redrive.Request) (redrive.Status, error) {
				r.Requester, r.Authenticated = c.name(r.Requester), c.authenticated()
				if err := r.Validate(); err != nil {
					return redrive.Status{}, err // bad input first, whoever asks
				}
				if !c.authenticated() {
					if q, err := g.DescribeDLQ(ctx, r.DLQ); err == nil && q.ReviewRequired {
						return redrive.Status{}, c.needAuth(fmt.Sprintf("DLQ %s is marked review: required: a redrive request for it", q.Name))
					}
				}
				return g.Submit(ctx, r)
			}),
		action("redrive_approve", redrive.SubjApprove, (*redrive.Guard).Approve),
		action("redrive_reject", redrive.SubjReject, (*redrive.Guard).Reject),
		action("redrive_run", redrive.SubjRun, (*redrive.Guard).Run),
		action("redrive_pause", redrive.SubjPause, (*redrive.Guard).Pause),
		action("redrive_resume", redrive.SubjResume, (*redrive.Guard).Resume),
		action("redrive_cancel", redrive.SubjCancel, (*redrive.Guard).Cancel),
		guardedRep(d, v, "redrive_status", redrive.SubjStatus, func(r redrive.IDRequest) string { return r.Scope },
			func(ctx context.Context, g *redrive.Guard, _ caller, r redrive.IDRequest) (redrive.Status, error) {
				return g.Get(ctx, r.ID)
			}),
		guardedRep(d, v, "redrive_list", redrive.SubjList, func(r redrive.ListFilter) string { return r.Scope },
			func(ctx context.Context, g *redrive.Guard, _ caller, f redrive.ListFilter) ([]redrive.Status, error) {
				return g.List(ctx, f)
			}),
		guardedRep(d, v, "redrive_dryrun", redrive.SubjDryRun, func(r redrive.IDRequest) string { return r.Scope },
			func(ctx context.Context, g *redrive.Guard, _ caller, r redrive.IDRequest) (redrive.Preview, error) {
				return g.DryRun(ctx, r.ID)
			}),
		guardedRep(d, v, "redrive_history", redrive.SubjHistory, func(r redrive.HistoryFilter) string { return r.Scope },
			func(ctx context.Context, g *redrive.Guard, _ caller, f redrive.HistoryFilter) ([]redrive.AuditRecord, error) {
				return g.History(ctx, f)
			}),
	}
}

// reviewGuard refuses, on a DLQ marked review: required, an unsigned
// approve, run or resume (verb), and an approval of a request whose
// requester was not authenticated (four eyes cannot be checked). The
// service itself then refuses an approval by the requester.
func reviewGuard(ctx context.Context, s *redrive.Service, c caller, id, verb string, approve bool) error {
	st, err := s.Get(ctx, id)
	if err != nil || !st.ReviewRequired {
		return err
	}
	if err := c.needAuth(fmt.Sprintf("%s redrive %s of %s (marked review: required)", verb, id, st.Object)); err != nil {
		return err
	}
	if approve && !st.Authenticated {
		return refused{fmt.Errorf("%w: redrive %s of %s (marked review: required) was requested by %s without an authenticated principal, so four eyes cannot be checked: file a new request with --user-creds; nothing was done",
			redrive.ErrForbidden, id, st.Object, st.Requester)}
	}
	return nil
}
