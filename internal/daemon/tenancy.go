package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/msgplatform/platform/conf"
	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/tenancy"
)

// startTenancy starts the tenancy manager (registry, audit, the ingest of
// every active tenant), creates the tenants declared in the
// configuration, and registers the per-tenant metrics.
func (d *Daemon) startTenancy(ctx context.Context) error {
	urls := make([]string, len(d.nodes))
	for i, n := range d.nodes {
		urls[i] = n.ClientURL()
	}
	servers, daemons := len(d.nodes), 1
	if d.cfg.Mode == conf.ModeNode {
		servers = len(d.cfg.Node.Cluster.Routes) + 1
		daemons = servers // one platformd per node
	}
	m, err := tenancy.NewManager(d.nc, d.trust, tenancy.Config{
		URL: strings.Join(urls, ","), Servers: servers, Replicas: d.cfg.Durability().Replicas, Logger: d.log,
		PlatformConns: tenancy.PlatformConnsPerDaemon*daemons + tenancy.GateConnsPerNode*servers,
		Local:         tenancy.LocalNodes(d.nodes),
	})
	if err != nil {
		return err
	}
	if err := m.Start(ctx); err != nil {
		_ = m.Close(ctx)
		return err
	}
	d.tenants = m
	for _, n := range d.nodes { // per-subject permission violations audited
		m.WatchViolations(n.Server())
	}
	if err := m.EnsureDeclared(ctx, d.cfg.Tenants); err != nil {
		return err
	}
	d.reg.MustRegister(m.Collector())
	return nil
}

func (d *Daemon) stopTenancy(ctx context.Context) error {
	if d.tenants == nil {
		return nil
	}
	return d.tenants.Close(ctx)
}

// tenantsAs lists the tenants, each converted by conv; none when tenancy
// is off.
func tenantsAs[T any](ctx context.Context, d *Daemon, conv func(tenancy.Tenant) T) ([]T, error) {
	if d.tenants == nil {
		return nil, nil
	}
	ts, err := d.tenants.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]T, 0, len(ts))
	for _, t := range ts {
		out = append(out, conv(t))
	}
	return out, nil
}

// Tenants returns the tenancy manager (nil before Start).
func (d *Daemon) Tenants() *tenancy.Manager { return d.tenants }

// tenancyErr maps tenancy errors onto the control API's kinds.
func tenancyErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, tenancy.ErrInvalid), errors.Is(err, platform.ErrInvalidSpec):
		return fmt.Errorf("%w: %w", control.ErrInvalid, err)
	case errors.Is(err, tenancy.ErrNotFound), errors.Is(err, platform.ErrNotFound):
		return fmt.Errorf("%w: %w", control.ErrNotFound, err)
	case errors.Is(err, tenancy.ErrConflict), errors.Is(err, platform.ErrConflict):
		return fmt.Errorf("%w: %w", control.ErrConflict, err)
	}
	return err
}

// ep is mappedEP with tenancy's error kinds.
func ep[Req, Resp any](name, subject string, fn func(ctx context.Context, req Req) (Resp, error)) control.Endpoint {
	return mappedEP(name, subject, tenancyErr, fn)
}

// tenancyEndpoints are the tenant, user, usage and audit operations of
// the control API.
func (d *Daemon) tenancyEndpoints() []control.Endpoint {
	m := d.tenants
	if m == nil {
		return nil
	}
	type ok struct {
		OK bool `json:"ok"`
	}
	return []control.Endpoint{
		ep("tenant_create", tenancy.SubjTenantCreate, func(ctx context.Context, r tenancy.CreateRequest) (tenancy.Tenant, error) {
			return m.Create(ctx, r.Actor, r.Spec)
		}),
		ep("tenant_list", tenancy.SubjTenantList, func(ctx context.Context, _ struct{}) ([]tenancy.Tenant, error) {
			return m.List(ctx)
		}),
		ep("tenant_show", tenancy.SubjTenantShow, func(ctx context.Context, r tenancy.NameRequest) (tenancy.Tenant, error) {
			return m.Get(ctx, r.Name)
		}),
		ep("tenant_update", tenancy.SubjTenantUpdate, func(ctx context.Context, r tenancy.UpdateRequest) (tenancy.Tenant, error) {
			return m.Update(ctx, r.Actor, r.Name, r.Quota)
		}),
		ep("tenant_suspend", tenancy.SubjTenantSuspend, func(ctx context.Context, r tenancy.NameRequest) (tenancy.Tenant, error) {
			return m.Suspend(ctx, r.Actor, r.Name)
		}),
		ep("tenant_resume", tenancy.SubjTenantResume, func(ctx context.Context, r tenancy.NameRequest) (tenancy.Tenant, error) {
			return m.Resume(ctx, r.Actor, r.Name)
		}),
		ep("tenant_delete", tenancy.SubjTenantDelete, func(ctx context.Context, r tenancy.NameRequest) (ok, error) {
			return ok{true}, m.Delete(ctx, r.Actor, r.Name, r.Purge)
		}),
		ep("tenant_topic_apply", tenancy.SubjTenantTopic, func(ctx context.Context, r tenancy.TopicRequest) (catalog.Change, error) {
			return m.ApplyTopic(ctx, r.Actor, r.Tenant, r.Spec, r.Options)
		}),
		ep("tenant_queue_apply", tenancy.SubjTenantQueue, func(ctx context.Context, r tenancy.QueueRequest) (catalog.Change, error) {
			return m.ApplyQueue(ctx, r.Actor, r.Tenant, r.Spec, r.Options)
		}),
		ep("tenant_group_apply", tenancy.SubjTenantGroup, func(ctx context.Context, r tenancy.GroupRequest) (catalog.Change, error) {
			return m.ApplyGroup(ctx, r.Actor, r.Tenant, r.Spec, r.Options)
		}),
		ep("user_add", tenancy.SubjUserAdd, func(ctx context.Context, r tenancy.UserRequest) (tenancy.UserCreds, error) {
			return m.AddUser(ctx, r.Actor, r.Tenant, r.User)
		}),
		ep("user_update", tenancy.SubjUserUpdate, func(ctx context.Context, r tenancy.UserRequest) (tenancy.User, error) {
			return m.UpdateUser(ctx, r.Actor, r.Tenant, r.User)
		}),
		ep("user_list", tenancy.SubjUserList, func(ctx context.Context, r tenancy.NameRequest) ([]tenancy.User, error) {
			return m.ListUsers(ctx, r.Name)
		}),
		ep("user_revoke", tenancy.SubjUserRevoke, func(ctx context.Context, r tenancy.RevokeRequest) (tenancy.User, error) {
			return m.RevokeUser(ctx, r.Actor, r.Tenant, r.User)
		}),
		ep("tenant_share", tenancy.SubjTenantShare, func(ctx context.Context, r tenancy.ShareRequest) (tenancy.Share, error) {
			return m.ShareTopic(ctx, r.Actor, r)
		}),
		ep("tenant_shares", tenancy.SubjTenantShares, func(ctx context.Context, r tenancy.NameRequest) ([]tenancy.Share, error) {
			return m.Shares(ctx, r.Name)
		}),
		ep("usage", tenancy.SubjUsage, func(ctx context.Context, r tenancy.NameRequest) ([]tenancy.Usage, error) {
			return m.Usage(ctx, r.Name)
		}),
		ep("audit", tenancy.SubjAudit, func(ctx context.Context, r tenancy.AuditFilter) ([]tenancy.Record, error) {
			return m.Audit(ctx, r)
		}),
	}
}
