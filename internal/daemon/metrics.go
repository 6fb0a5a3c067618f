package daemon

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/redrive"
	"github.com/msgplatform/platform/tenancy"
)

// registerCatalogMetrics exports the catalog figures the alert rules join
// on (platform_topic_retention_seconds, platform_group_info,
// platform_group_tolerance_seconds; see catalog.Collector), read
// from the broker at scrape time. Group tolerances come from the declared
// catalog (groups.<name>.tolerance); a group applied through the control
// API has the default.
//
// It also registers the DLQ metrics of tenant accounts (tenantDLQMetrics).
func (d *Daemon) registerCatalogMetrics() {
	groups := d.cfg.Catalog.Groups
	d.reg.MustRegister(catalog.NewCollector(d.rec, func(group string) time.Duration {
		return groups[group].EffectiveTolerance()
	}))
	d.reg.MustRegister(&tenantDLQMetrics{d: d})
}

// tenantDLQMetrics exports the DLQ metrics (platform_dlq_depth,
// platform_dlq_oldest_age_seconds, the fingerprint and expiry series) of
// every active tenant's account with tenant=<name>, next to the platform
// admin account's (tenant="", registered with the admin redrive service).
// Each tenant's DLQs are read over a connection of the platform service
// user platform-svc:dlq-metrics of its account (tenancy.Manager.
// ConnectTenant, as the tenant redrive services do), made at the first
// scrape and closed with the admin redrive service. It is registered
// before tenancy and redrive start and built at the first scrape after
// (the HTTP server starts last). Its Describe sends nothing: the series
// share the admin collector's descriptors.
type tenantDLQMetrics struct {
	d    *Daemon
	once sync.Once
	c    prometheus.Collector
}

func (m *tenantDLQMetrics) Describe(chan<- *prometheus.Desc) {}

func (m *tenantDLQMetrics) Collect(ch chan<- prometheus.Metric) {
	d := m.d
	if d.redrive == nil || d.tenants == nil {
		return
	}
	m.once.Do(func() {
		m.c = d.redrive.TenantCollector(redriveTenantAccounts(d))
	})
	m.c.Collect(ch)
}

func redriveTenantAccounts(d *Daemon) redrive.TenantAccounts {
	return redrive.TenantAccounts{
		List: func(ctx context.Context) ([]string, error) {
			ts, err := d.tenants.List(ctx)
			if err != nil {
				return nil, err
			}
			var names []string
			for _, t := range ts {
				if t.State == tenancy.StateActive {
					names = append(names, t.Name)
				}
			}
			return names, nil
		},
		Connect: func(ctx context.Context, tenant string) (*nats.Conn, error) {
			return d.ConnectTenant(ctx, tenant, "dlq-metrics", nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
		},
		NamePrefix: tenancy.StoredName(""),
		APIPrefix:  tenancy.APIPrefix,
	}
}
