package consumer

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgplatform/platform/platform"
)

// skipCanary acknowledges a canary without passing it on, and records
// when it was processed: a canary never reaches a handler, even when
// fenced (the partition's next owner acks it).
func (s *settler) skipCanary(next Handler) Handler {
	return s.skip(next, func(m *Message) bool { return platform.IsCanary(m.Header) }, func() {
		s.metrics.canaryProcessed(s.group, s.partition, time.Now())
	})
}

// newCanaryGauge is Metrics' record of the last canary processed.
func newCanaryGauge() *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "platform_consumer_canary_processed_timestamp_seconds",
		Help: "Unix time this process last acknowledged a canary of the group and partition (the runtime's own view; platform_canary_age_seconds is the broker's).",
	}, []string{"group", "partition"})
}

// canaryProcessed is a no-op on a nil *Metrics.
func (c *Metrics) canaryProcessed(group, partition string, at time.Time) {
	if c != nil {
		c.canaryG.WithLabelValues(group, partition).Set(float64(at.UnixNano()) / 1e9)
	}
}
