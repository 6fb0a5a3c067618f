package redrive

import (
	"context"
	"sort"
	"sync"
	"time"

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
func (s *Service) Collector() prometheus.Collector {
	return &collector{s: s, topK: FingerprintTopK, rescan: FingerprintRescan, clock: time.Now, cache: map[string]*dlqScan{}}
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
	s      *Service
	topK   int
	rescan time.Duration
	clock  func() time.Time // time.Now; tests move it

	mu    sync.Mutex
	cache map[string]*dlqScan // by DLQ stream
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

var (
	descDepth   = prometheus.NewDesc("platform_dlq_depth", "Entries in the DLQ.", []string{"dlq", "owner"}, nil)
	descAge     = prometheus.NewDesc("platform_dlq_oldest_age_seconds", "Age of the DLQ's oldest entry (0 when empty).", []string{"dlq", "owner"}, nil)
	descRatio   = prometheus.NewDesc("platform_dlq_oldest_age_retention_ratio", "Oldest entry's age / DLQ retention; entries expire (are lost) at 1.", []string{"dlq", "owner"}, nil)
	descNear    = prometheus.NewDesc("platform_dlq_entries_near_expiry", "Entries older than the warning fraction (platform_dlq_expiry_warn_fraction) of the DLQ retention: redrive or export them before they are lost.", []string{"dlq", "owner"}, nil)
	descWarnFr  = prometheus.NewDesc("platform_dlq_expiry_warn_fraction", "Share of the DLQ retention past which an entry counts as near expiry.", nil, nil)
	descFPDepth = prometheus.NewDesc("platform_dlq_fingerprint_depth", "Entries in the DLQ with this error fingerprint (top fingerprints; the rest as fingerprint=\"other\").", []string{"dlq", "owner", "fingerprint", "class"}, nil)
	descFPAge   = prometheus.NewDesc("platform_dlq_fingerprint_oldest_age_seconds", "Age of the oldest DLQ entry with this error fingerprint.", []string{"dlq", "owner", "fingerprint", "class"}, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descDepth, descAge, descRatio, descNear, descWarnFr, descFPDepth, descFPAge} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dlqs, err := c.s.ListDLQs(ctx)
	if err != nil {
		c.s.log.Warn("redrive: metrics: list DLQs", "err", err)
		return
	}
	now := c.clock()
	ch <- prometheus.MustNewConstMetric(descWarnFr, prometheus.GaugeValue, ExpiryWarnFraction)
	seen := map[string]bool{}
	for _, d := range dlqs {
		seen[d.Stream] = true
		ch <- prometheus.MustNewConstMetric(descDepth, prometheus.GaugeValue, float64(d.Depth), d.Name, d.Owner)
		ch <- prometheus.MustNewConstMetric(descAge, prometheus.GaugeValue, d.OldestAge.Seconds(), d.Name, d.Owner)
		ratio := 0.0
		if d.Retention > 0 {
			ratio = float64(d.OldestAge) / float64(d.Retention)
		}
		ch <- prometheus.MustNewConstMetric(descRatio, prometheus.GaugeValue, ratio, d.Name, d.Owner)
		sc := c.scanned(ctx, d, now)
		near := 0
		if sc != nil && d.Retention > 0 {
			cutoff := now.Add(-time.Duration(ExpiryWarnFraction * float64(d.Retention))).UnixNano()
			near = sort.Search(len(sc.times), func(i int) bool { return sc.times[i] > cutoff })
		}
		ch <- prometheus.MustNewConstMetric(descNear, prometheus.GaugeValue, float64(near), d.Name, d.Owner)
		if sc != nil {
			for _, g := range sc.groups {
				ch <- prometheus.MustNewConstMetric(descFPDepth, prometheus.GaugeValue, float64(g.count), d.Name, d.Owner, g.fingerprint, g.class)
				ch <- prometheus.MustNewConstMetric(descFPAge, prometheus.GaugeValue, max(now.Sub(g.oldest), 0).Seconds(), d.Name, d.Owner, g.fingerprint, g.class)
			}
		}
		if d.ExpiryWarning {
			c.s.log.Warn("redrive: DLQ entries near expiry: redrive or export them before they are lost",
				"dlq", d.Name, "owner", d.Owner, "entries", near, "oldest_age", d.OldestAge.Round(time.Second), "retention", d.Retention)
		}
	}
	c.mu.Lock()
	for k := range c.cache {
		if !seen[k] {
			delete(c.cache, k) // the DLQ is gone
		}
	}
	c.mu.Unlock()
}

// scanned returns the DLQ's last scan, scanning it again if it changed
// and the last scan is older than the rescan interval. nil if it was
// never scanned and cannot be now.
func (c *collector) scanned(ctx context.Context, d DLQ, now time.Time) *dlqScan {
	c.mu.Lock()
	prev := c.cache[d.Stream]
	c.mu.Unlock()
	if d.Depth == 0 {
		return &dlqScan{}
	}
	if prev != nil && (prev.firstSeq == d.FirstSeq && prev.lastSeq == d.LastSeq || now.Sub(prev.at) < c.rescan) {
		return prev
	}
	sc, err := c.scan(ctx, d, now)
	if err != nil {
		c.s.log.Warn("redrive: metrics: scan DLQ", "dlq", d.Name, "err", err)
		return prev
	}
	c.mu.Lock()
	c.cache[d.Stream] = sc
	c.mu.Unlock()
	return sc
}

// scan reads every entry of the DLQ once: fingerprints and append times.
func (c *collector) scan(ctx context.Context, d DLQ, now time.Time) (*dlqScan, error) {
	sc := &dlqScan{firstSeq: d.FirstSeq, lastSeq: d.LastSeq, at: now}
	byFP := map[string]*fingerprintStat{}
	err := scan(ctx, c.s.js, d.Stream, d.FirstSeq, func(m *jetstream.RawStreamMsg) bool {
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
	all := make([]fingerprintStat, 0, len(byFP))
	for _, g := range byFP {
		all = append(all, *g)
	}
	sort.Slice(all, func(i, j int) bool {
		if all[i].count != all[j].count {
			return all[i].count > all[j].count
		}
		return all[i].fingerprint < all[j].fingerprint
	})
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
