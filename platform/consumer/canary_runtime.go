package consumer

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgplatform/platform/platform"
)

// canary settles raw if it is a canary: acks it (unless fenced) without
// running the handler and records when it was processed. It reports
// whether raw was a canary; a canary is never handed to a handler, even
// when fenced (the partition's next owner acks it).
func (s *settler) canary(raw jetstream.Msg, fenced func() bool) bool {
	if !platform.IsCanary(raw.Headers()) {
		return false
	}
	if fenced() {
		return true
	}
	if err := raw.Ack(); err == nil {
		s.metrics.canaryProcessed(s.group, s.partition, time.Now())
	}
	return true
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
