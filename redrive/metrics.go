package redrive

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports, per DLQ: its depth, the age of its oldest entry, that
// age as a share of the DLQ's retention, and how many entries are older
// than ExpiryWarnFraction of the retention (alert on it: expiry there is
// permanent loss); and per error fingerprint of each DLQ the depth and
// oldest age. Depth and age per DLQ are read from stream info at scrape
// time. The fingerprint and expiry figures need the entries: the DLQ is
// scanned again only when it changed (first or last sequence) and at most
// every FingerprintRescan, and the entries' append times are kept (8 bytes
// each) so the expiry count stays current between scans.
//
// Cardinality is bounded: the FingerprintTopK largest fingerprints of a
// DLQ get their own series, the rest are summed under fingerprint "other"
// (its oldest age the oldest among them).
//
// Every series has a tenant label: "" for the platform admin account
// (the series the alert rules have always seen: a label with an empty
// value is no label to Prometheus), the tenant's name for a tenant
// account's DLQs (TenantCollector). The service's own account is the
// only one Collector reads: the admin account's service in platformd.
func (s *Service) Collector() prometheus.Collector {
	c := newCollector(s.log)
	c.scopes = func(context.Context) []metricScope {
		return []metricScope{{tenant: s.cfg.Tenant, l: s.l}}
	}
	return c
}

func newCollector(log *slog.Logger) *collector {
	return &collector{log: log, topK: FingerprintTopK, rescan: FingerprintRescan, clock: time.Now, cache: map[string]*dlqScan{}}
}

// metricScope is one account whose DLQs are exported.
type metricScope struct {
	tenant string
	l      lister
}

// TenantAccounts is how TenantCollector reaches the tenant accounts.
type TenantAccounts struct {
	// List returns the tenants whose DLQs are exported (platformd: the
	// active ones).
	List func(ctx context.Context) ([]string, error)
	// Connect connects to a tenant's account (platformd: the platform
	// service user of the account, tenancy.Manager.ConnectTenant).
	Connect func(ctx context.Context, tenant string) (*nats.Conn, error)
	// NamePrefix is the prefix of stored object names in a tenant's
	// account (tenancy.StoredName("")), not shown in the dlq label.
	NamePrefix string
	// APIPrefix is the JetStream API prefix of the platform's
	// connections in a tenant's account (tenancy.APIPrefix; "" the
	// default).
	APIPrefix string
}

// TenantCollector exports the DLQ metrics of Collector for every tenant
// account src lists, labelled tenant=<name>. Each tenant's connection is
// made at its first scrape and kept (made again if it closed) until the
// service closes; a tenant no longer listed has its connection closed.
// A tenant that cannot be read is logged and skipped: the others are
// still exported.
//
// Its Describe sends nothing (an unchecked collector), so it registers
// next to the admin account's Collector, whose descriptors it shares.
func (s *Service) TenantCollector(src TenantAccounts) prometheus.Collector {
	tc := &tenantConns{s: s, src: src, conns: map[string]*tenantConn{}}
	c := newCollector(s.log)
	c.scopes = tc.scopes
	c.unchecked = true
	return c
}

type tenantConns struct {
	s   *Service
	src TenantAccounts

	mu     sync.Mutex
	conns  map[string]*tenantConn
	closer bool // the goroutine closing them with the service runs
}

type tenantConn struct {
	nc *nats.Conn
	js jetstream.JetStream
}

func (tc *tenantConns) scopes(ctx context.Context) []metricScope {
	names, err := tc.src.List(ctx)
	if err != nil {
		tc.s.log.Warn("redrive: metrics: list tenants", "err", err)
		return nil
	}
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if tc.s.ctx == nil || tc.s.ctx.Err() != nil {
		return nil // not started, or closed
	}
	if !tc.closer {
		tc.closer = true
		go func() {
			<-tc.s.ctx.Done()
			tc.mu.Lock()
			defer tc.mu.Unlock()
			for name, c := range tc.conns {
				c.nc.Close()
				delete(tc.conns, name)
			}
		}()
	}
	listed := map[string]bool{}
	var out []metricScope
	for _, name := range names {
		listed[name] = true
		c := tc.conns[name]
		if c != nil && c.nc.IsClosed() {
			delete(tc.conns, name)
			c = nil
		}
		if c == nil {
			nc, err := tc.src.Connect(ctx, name)
			if err != nil {
				tc.s.log.Warn("redrive: metrics: connect to tenant account", "tenant", name, "err", err)
				continue
			}
			js, err := newJetStream(nc, tc.src.APIPrefix)
			if err != nil {
				nc.Close()
				continue
			}
			c = &tenantConn{nc: nc, js: js}
			tc.conns[name] = c
		}
		out = append(out, metricScope{tenant: name, l: lister{js: c.js, prefix: tc.src.NamePrefix}})
	}
	for name, c := range tc.conns {
		if !listed[name] {
			c.nc.Close()
			delete(tc.conns, name)
		}
	}
	return out
}

// Fingerprint metrics bounds.
const (
	// FingerprintTopK is how many fingerprints per DLQ get their own
	// series.
	FingerprintTopK = 10
	// FingerprintRescan is the shortest time between two scans of one DLQ.
	FingerprintRescan = 30 * time.Second
	// OtherFingerprint labels the fingerprints beyond the top K.
	OtherFingerprint = "other"
)

type collector struct {
	log    *slog.Logger
	scopes func(context.Context) []metricScope
	// unchecked: Describe sends nothing (TenantCollector).
	unchecked bool
	topK      int
	rescan    time.Duration
	clock     func() time.Time // time.Now; tests move it

	mu    sync.Mutex
	cache map[string]*dlqScan // by tenant and DLQ stream
}

// dlqScan is what one scan of a DLQ found.
type dlqScan struct {
	firstSeq, lastSeq uint64
	at                time.Time
	groups            []fingerprintStat // largest first, at most topK + other
	times             []int64           // entry append times, ascending (unix ns)
}

type fingerprintStat struct {
	fingerprint, class string
	count              int
	oldest             time.Time
}

// The labels of the per-DLQ series: tenant is "" for the platform admin
// account.
var (
	dlqLabels   = []string{"dlq", "owner", "tenant"}
	fpLabels    = []string{"dlq", "owner", "tenant", "fingerprint", "class"}
	descDepth   = prometheus.NewDesc("platform_dlq_depth", "Entries in the DLQ.", dlqLabels, nil)
	descAge     = prometheus.NewDesc("platform_dlq_oldest_age_seconds", "Age of the DLQ's oldest entry (0 when empty).", dlqLabels, nil)
	descRatio   = prometheus.NewDesc("platform_dlq_oldest_age_retention_ratio", "Oldest entry's age / DLQ retention; entries expire (are lost) at 1.", dlqLabels, nil)
	descNear    = prometheus.NewDesc("platform_dlq_entries_near_expiry", "Entries older than the warning fraction (platform_dlq_expiry_warn_fraction) of the DLQ retention: redrive or export them before they are lost.", dlqLabels, nil)
	descWarnFr  = prometheus.NewDesc("platform_dlq_expiry_warn_fraction", "Share of the DLQ retention past which an entry counts as near expiry.", nil, nil)
	descFPDepth = prometheus.NewDesc("platform_dlq_fingerprint_depth", "Entries in the DLQ with this error fingerprint (top fingerprints; the rest as fingerprint=\"other\").", fpLabels, nil)
	descFPAge   = prometheus.NewDesc("platform_dlq_fingerprint_oldest_age_seconds", "Age of the oldest DLQ entry with this error fingerprint.", fpLabels, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	if c.unchecked {
		return
	}
	for _, d := range []*prometheus.Desc{descDepth, descAge, descRatio, descNear, descWarnFr, descFPDepth, descFPAge} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	now := c.clock()
	if !c.unchecked {
		ch <- prometheus.MustNewConstMetric(descWarnFr, prometheus.GaugeValue, ExpiryWarnFraction)
	}
	seen := map[string]bool{}
	for _, sc := range c.scopes(ctx) {
		c.collectScope(ctx, ch, sc, now, seen)
	}
	c.mu.Lock()
	for k := range c.cache {
		if !seen[k] {
			delete(c.cache, k) // the DLQ (or the tenant) is gone
		}
	}
	c.mu.Unlock()
}

func (c *collector) collectScope(ctx context.Context, ch chan<- prometheus.Metric, scope metricScope, now time.Time, seen map[string]bool) {
	dlqs, err := scope.l.List(ctx)
	if err != nil {
		c.log.Warn("redrive: metrics: list DLQs", "tenant", scope.tenant, "err", err)
		return
	}
	for _, d := range dlqs {
		key := scope.tenant + "/" + d.Stream
		seen[key] = true
		ch <- prometheus.MustNewConstMetric(descDepth, prometheus.GaugeValue, float64(d.Depth), d.Name, d.Owner, scope.tenant)
		ch <- prometheus.MustNewConstMetric(descAge, prometheus.GaugeValue, d.OldestAge.Seconds(), d.Name, d.Owner, scope.tenant)
		ratio := 0.0
		if d.Retention > 0 {
			ratio = float64(d.OldestAge) / float64(d.Retention)
		}
		ch <- prometheus.MustNewConstMetric(descRatio, prometheus.GaugeValue, ratio, d.Name, d.Owner, scope.tenant)
		sc := c.scanned(ctx, scope, key, d, now)
		near := 0
		if sc != nil && d.Retention > 0 {
			cutoff := now.Add(-time.Duration(ExpiryWarnFraction * float64(d.Retention))).UnixNano()
			near = sort.Search(len(sc.times), func(i int) bool { return sc.times[i] > cutoff })
		}
		ch <- prometheus.MustNewConstMetric(descNear, prometheus.GaugeValue, float64(near), d.Name, d.Owner, scope.tenant)
		if sc != nil {
			for _, g := range sc.groups {
				ch <- prometheus.MustNewConstMetric(descFPDepth, prometheus.GaugeValue, float64(g.count), d.Name, d.Owner, scope.tenant, g.fingerprint, g.class)
				ch <- prometheus.MustNewConstMetric(descFPAge, prometheus.GaugeValue, max(now.Sub(g.oldest), 0).Seconds(), d.Name, d.Owner, scope.tenant, g.fingerprint, g.class)
			}
		}
		if d.ExpiryWarning {
			c.log.Warn("redrive: DLQ entries near expiry: redrive or export them before they are lost",
				"dlq", d.Name, "owner", d.Owner, "tenant", scope.tenant, "entries", near, "oldest_age", d.OldestAge.Round(time.Second), "retention", d.Retention)
		}
	}
}

// scanned returns the DLQ's last scan, scanning it again if it changed
// and the last scan is older than the rescan interval. nil if it was
// never scanned and cannot be now.
func (c *collector) scanned(ctx context.Context, scope metricScope, key string, d DLQ, now time.Time) *dlqScan {
	c.mu.Lock()
	prev := c.cache[key]
	c.mu.Unlock()
	if d.Depth == 0 {
		return &dlqScan{}
	}
	if prev != nil && (prev.firstSeq == d.FirstSeq && prev.lastSeq == d.LastSeq || now.Sub(prev.at) < c.rescan) {
		return prev
	}
	sc, err := c.scan(ctx, scope.l.js, d, now)
	if err != nil {
		c.log.Warn("redrive: metrics: scan DLQ", "dlq", d.Name, "tenant", scope.tenant, "err", err)
		return prev
	}
	c.mu.Lock()
	c.cache[key] = sc
	c.mu.Unlock()
	return sc
}

// scan reads every entry of the DLQ once: fingerprints and append times.
func (c *collector) scan(ctx context.Context, js jetstream.JetStream, d DLQ, now time.Time) (*dlqScan, error) {
	sc := &dlqScan{firstSeq: d.FirstSeq, lastSeq: d.LastSeq, at: now}
	byFP := map[string]*fingerprintStat{}
	err := scan(ctx, js, d.Stream, d.FirstSeq, func(m *jetstream.RawStreamMsg) bool {
		e := toEntry(m, false)
		g := byFP[e.Fingerprint]
		if g == nil {
			g = &fingerprintStat{fingerprint: e.Fingerprint, class: e.Class, oldest: e.Time}
			byFP[e.Fingerprint] = g
		}
		g.count++
		if e.Time.Before(g.oldest) {
			g.oldest = e.Time
		}
		sc.times = append(sc.times, e.Time.UnixNano())
		return true
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(sc.times, func(i, j int) bool { return sc.times[i] < sc.times[j] })
	sc.groups = topFingerprints(byFP, c.topK)
	return sc, nil
}

// topFingerprints returns the k largest fingerprints (ties by
// fingerprint) and, if there are more, one "other" summing the rest.
func topFingerprints(byFP map[string]*fingerprintStat, k int) []fingerprintStat {
	all := largestFirst(byFP, func(g *fingerprintStat) int { return g.count })
	if len(all) <= k {
		return all
	}
	other := fingerprintStat{fingerprint: OtherFingerprint, class: OtherFingerprint, oldest: all[k].oldest}
	for _, g := range all[k:] {
		other.count += g.count
		if g.oldest.Before(other.oldest) {
			other.oldest = g.oldest
		}
	}
	return append(all[:k:k], other)
}
