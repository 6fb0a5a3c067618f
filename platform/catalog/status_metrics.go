package catalog

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgplatform/platform/platform"
)

// Collector exports, at scrape time, what the alert rules need to
// know about the catalog (deploy/prometheus/rules.yaml):
//
//   - platform_topic_retention_seconds{topic}: the topic's max_age (topics
//     bounded by size only have no series);
//   - platform_group_info{group,topic} 1: which topic each group reads;
//   - platform_group_tolerance_seconds{group}: the group's tolerance.
//
// Topics and groups are read from the broker (stream and consumer
// metadata), so objects applied through the control API are included.
// The tolerance is the one recorded on the group's consumers when it was
// applied, else the tolerances function's (the declared catalog), else
// platform.DefaultGroupTolerance. A scrape that cannot list the catalog within
// its timeout exports nothing for it (the alerts then fall back to their
// defaults) rather than stale values.
type Collector struct {
	r          *Reconciler
	tolerances func(group string) time.Duration
	timeout    time.Duration
}

var _ prometheus.Collector = (*Collector)(nil)

var (
	dTopicRetention = prometheus.NewDesc("platform_topic_retention_seconds",
		"The topic's retention by age (max_age) in seconds.", []string{"topic"}, nil)
	dGroupInfo = prometheus.NewDesc("platform_group_info",
		"1 for each consumer group and the topic it reads.", []string{"group", "topic"}, nil)
	dGroupTolerance = prometheus.NewDesc("platform_group_tolerance_seconds",
		"Oldest unprocessed age the group tolerates before PlatformGroupOldestUnprocessedAboveTolerance fires (groups.<name>.tolerance, default 300 s).", []string{"group"}, nil)
)

// NewCollector returns a collector over r's catalog. tolerances
// may be nil (every group then has platform.DefaultGroupTolerance); a zero or
// negative result also means the default.
func NewCollector(r *Reconciler, tolerances func(group string) time.Duration) *Collector {
	return &Collector{r: r, tolerances: tolerances, timeout: 5 * time.Second}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- dTopicRetention
	ch <- dGroupInfo
	ch <- dGroupTolerance
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	topics, err := c.r.ListTopics(ctx)
	if err != nil {
		c.r.log.Debug("platform: catalog metrics: list topics", "err", err)
		return
	}
	seen := map[string]bool{}
	for _, t := range topics {
		if t.Spec.Retention.MaxAge > 0 {
			ch <- prometheus.MustNewConstMetric(dTopicRetention, prometheus.GaugeValue, t.Spec.Retention.MaxAge.Seconds(), t.Spec.Name)
		}
		cs, err := c.r.listConsumers(ctx, platform.StreamName(t.Spec.Name))
		if err != nil {
			c.r.log.Debug("platform: catalog metrics: list consumers", "topic", t.Spec.Name, "err", err)
			continue
		}
		for _, ci := range cs {
			g := ci.Config.Metadata[platform.MetaGroup]
			if g == "" || ci.Config.Metadata[platform.MetaTopic] != t.Spec.Name || seen[g+"\x00"+t.Spec.Name] {
				continue
			}
			seen[g+"\x00"+t.Spec.Name] = true
			ch <- prometheus.MustNewConstMetric(dGroupInfo, prometheus.GaugeValue, 1, g, t.Spec.Name)
			if !seen[g] {
				seen[g] = true
				tol := c.tolerance(g)
				if d, err := time.ParseDuration(ci.Config.Metadata[platform.MetaTolerance]); err == nil && d > 0 {
					tol = d // recorded on the group's consumers when it was applied
				}
				ch <- prometheus.MustNewConstMetric(dGroupTolerance, prometheus.GaugeValue, tol.Seconds(), g)
			}
		}
	}
}

func (c *Collector) tolerance(group string) time.Duration {
	if c.tolerances != nil {
		if d := c.tolerances(group); d > 0 {
			return d
		}
	}
	return platform.DefaultGroupTolerance
}
