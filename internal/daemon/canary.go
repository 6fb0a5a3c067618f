package daemon

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgplatform/platform/platform/canary"
	"github.com/msgplatform/platform/tenancy"
)

// startCanary starts publishing canaries into the platform account's
// topics and queues (canary.interval; 0 turns it off) and registers
// platform_canary_age_seconds{topic,group}, computed from the broker's
// ack floors, on the daemon's registry. With tenancy running it also
// starts the tenants' canaries (see tenantCanaries).
func (d *Daemon) startCanary(ctx context.Context) error {
	if !d.cfg.Canary.Enabled() {
		d.log.Info("platformd: canary off (canary.interval is 0)")
		return nil
	}
	c, err := canary.New(d.js, d.cfg.Canary, d.log)
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	d.canary = c
	d.reg.MustRegister(c)
	if d.tenants != nil {
		tc := newTenantCanaries(d.tenants, d.cfg.Canary, d)
		tc.sync(ctx)
		tc.start()
		d.tenantCanaries = tc
		d.reg.MustRegister(tc)
	}
	return nil
}

func (d *Daemon) stopCanary(ctx context.Context) error {
	var errs []error
	if d.tenantCanaries != nil {
		errs = append(errs, d.tenantCanaries.close(ctx))
	}
	if d.canary != nil {
		errs = append(errs, d.canary.Close(ctx))
	}
	return errors.Join(errs...)
}

// CanaryAges returns every group's canary age, the platform account's
// then the tenants' (Tenant set); nil when the canary is off or the
// daemon not started.
func (d *Daemon) CanaryAges() []canary.Age {
	if d.canary == nil {
		return nil
	}
	out := d.canary.Ages()
	if d.tenantCanaries != nil {
		out = append(out, d.tenantCanaries.ages()...)
	}
	return out
}

// tenantCanaries runs one canary.Monitor per active tenant: canaries go
// into every tenant topic and queue that does not
// opt out, and platform_canary_age_seconds{tenant,topic,group} is
// exported for the tenant's groups.
//
// Each runs on tenancy's own platform connection to the tenant's account
// (Manager.TenantJetStream), so no connection is added to the tenant's
// count or quota, and publishes straight to the stored subjects, never
// through the tenant's ingest: canaries are not subject to the tenant's
// publish-rate quota and are not counted in its accepted publishes
// (usage msgs_in). They are stored events of the tenant's streams, so
// they do count in its storage and, once consumed, in its delivered
// messages (usage msgs_out): one event per partition per interval.
//
// Every sync period (the canary interval, between 1 s and 30 s) the set
// follows the registry: a new or resumed tenant gets a canary, a
// suspended or deleted one loses it, and a replaced tenancy runtime
// (suspend and resume through another daemon) restarts it.
type tenantCanaries struct {
	m   *tenancy.Manager
	cfg canary.Config
	d   *Daemon

	mu     sync.Mutex
	by     map[string]*tenantCanary
	closed bool

	stop chan struct{}
	done chan struct{}
}

type tenantCanary struct {
	c  *canary.Monitor
	js jetstream.JetStream
}

var _ prometheus.Collector = (*tenantCanaries)(nil)

func newTenantCanaries(m *tenancy.Manager, cfg canary.Config, d *Daemon) *tenantCanaries {
	return &tenantCanaries{m: m, cfg: cfg, d: d, by: map[string]*tenantCanary{}, stop: make(chan struct{}), done: make(chan struct{})}
}

func (t *tenantCanaries) start() {
	every := min(max(t.cfg.Interval, time.Second), 30*time.Second)
	go func() {
		defer close(t.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-t.stop:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), every+5*time.Second)
			t.sync(ctx)
			cancel()
		}
	}()
}

// sync starts and stops tenants' canaries to match the active tenants
// running on this daemon. Failures are logged and retried next period.
func (t *tenantCanaries) sync(ctx context.Context) {
	ts, err := t.m.List(ctx)
	if err != nil {
		t.d.log.Debug("platformd: tenant canaries: list tenants", "err", err)
		return
	}
	want := map[string]jetstream.JetStream{}
	for _, tn := range ts {
		if tn.State != tenancy.StateActive {
			continue
		}
		if js, err := t.m.TenantJetStream(tn.Name); err == nil {
			want[tn.Name] = js
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	for name, tc := range t.by {
		if js, ok := want[name]; !ok || js != tc.js {
			t.closeOne(ctx, name, tc)
		}
	}
	for name, js := range want {
		if t.by[name] != nil {
			continue
		}
		c, err := canary.NewTenant(js, t.cfg, t.d.log, name, tenancy.StoredName(""))
		if err == nil {
			err = c.Start(ctx)
		}
		if err != nil {
			t.d.log.Warn("platformd: tenant canary not started", "tenant", name, "err", err)
			continue
		}
		t.by[name] = &tenantCanary{c: c, js: js}
	}
}

// closeOne stops one tenant's canary. Callers hold t.mu.
func (t *tenantCanaries) closeOne(ctx context.Context, name string, tc *tenantCanary) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := tc.c.Close(cctx); err != nil {
		t.d.log.Warn("platformd: tenant canary close", "tenant", name, "err", err)
	}
	delete(t.by, name)
}

func (t *tenantCanaries) close(ctx context.Context) error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	close(t.stop)
	t.mu.Unlock()
	select {
	case <-t.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for name, tc := range t.by {
		t.closeOne(ctx, name, tc)
	}
	return nil
}

func (t *tenantCanaries) ages() []canary.Age {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []canary.Age
	for _, tc := range t.by {
		out = append(out, tc.c.Ages()...)
	}
	return out
}

// Describe sends nothing: the tenants' series share the name and help of
// the platform Canary's platform_canary_age_seconds (with a tenant
// label), which is the checked one.
func (t *tenantCanaries) Describe(chan<- *prometheus.Desc) {}

// Collect sends every tenant group's canary age.
func (t *tenantCanaries) Collect(ch chan<- prometheus.Metric) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, tc := range t.by {
		tc.c.CollectAges(ch)
	}
}
