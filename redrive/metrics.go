package redrive

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports, per DLQ: its depth, the age of its oldest entry, and
// that age as a share of the DLQ's retention (alert above
// ExpiryWarnFraction: expiry there is permanent loss). Read from stream
// info at scrape time (no entry scan).
func (s *Service) Collector() prometheus.Collector { return collector{s} }

type collector struct{ s *Service }

var (
	descDepth = prometheus.NewDesc("platform_dlq_depth", "Entries in the DLQ.", []string{"dlq", "owner"}, nil)
	descAge   = prometheus.NewDesc("platform_dlq_oldest_age_seconds", "Age of the DLQ's oldest entry (0 when empty).", []string{"dlq", "owner"}, nil)
	descRatio = prometheus.NewDesc("platform_dlq_oldest_age_retention_ratio", "Oldest entry's age / DLQ retention; entries expire (are lost) at 1.", []string{"dlq", "owner"}, nil)
)

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descDepth
	ch <- descAge
	ch <- descRatio
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	dlqs, err := c.s.ListDLQs(ctx)
	if err != nil {
		c.s.log.Warn("redrive: metrics: list DLQs", "err", err)
		return
	}
	for _, d := range dlqs {
		ch <- prometheus.MustNewConstMetric(descDepth, prometheus.GaugeValue, float64(d.Depth), d.Name, d.Owner)
		ch <- prometheus.MustNewConstMetric(descAge, prometheus.GaugeValue, d.OldestAge.Seconds(), d.Name, d.Owner)
		ratio := 0.0
		if d.Retention > 0 {
			ratio = float64(d.OldestAge) / float64(d.Retention)
		}
		ch <- prometheus.MustNewConstMetric(descRatio, prometheus.GaugeValue, ratio, d.Name, d.Owner)
		if d.ExpiryWarning {
			c.s.log.Warn("redrive: DLQ entries near expiry: redrive or export them before they are lost",
				"dlq", d.Name, "owner", d.Owner, "oldest_age", d.OldestAge.Round(time.Second), "retention", d.Retention)
		}
	}
}
