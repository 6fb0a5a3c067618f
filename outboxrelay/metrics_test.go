package outboxrelay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/metrics/metricstest"
)

// metricValue returns the value of the metric name (with label outcome, if
// not empty) on reg, failing t if there is none.
func metricValue(t *testing.T, reg *prometheus.Registry, name, outcome string) float64 {
	t.Helper()
	var match []string
	if outcome != "" {
		match = []string{"outcome", outcome}
	}
	samples, err := metricstest.Samples(reg, name, match...)
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) == 0 {
		t.Fatalf("metric %s{outcome=%q} not registered", name, outcome)
	}
	return samples[0].Value
}

// TestRelayMetricsAndUnpublishableEvents: events for a topic that does not
// exist are enqueued first; healthy events behind them are still
// published (the failing keys back off on their own), and the registry
// shows the backlog, the oldest unsent age and the publishes by outcome.
func TestRelayMetricsAndUnpublishableEvents(t *testing.T) {
	fx := newFixture(t)
	fx.eachBackend(t, "metrics-", func(t *testing.T, b *backend, topic string) {
		ctx := context.Background()
		bad := events("nostream-"+b.name, "no-such-topic", 20, 3)
		if err := b.enqueue(ctx, bad...); err != nil {
			t.Fatal(err)
		}
		good := events(topic, topic, 10, 5)
		if err := b.enqueue(ctx, good...); err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		cfg := testConfig(topic)
		cfg.BatchSize = 40 // the bad events fill the first read
		cfg.Registerer = reg
		r, _ := fx.startRelay(t, cfg, b.store)
		natstest.WaitFor(t, 20*time.Second, func() error {
			if c := r.Counts(); c.OK < uint64(len(good)) {
				return fmt.Errorf("counts %+v, want %d ok", c, len(good))
			}
			return nil
		})
		natstest.WaitFor(t, 10*time.Second, func() error {
			if v := metricValue(t, reg, "outboxrelay_backlog_events", ""); v != float64(len(bad)) {
				return fmt.Errorf("backlog gauge %v, want %d (the unpublishable events)", v, len(bad))
			}
			return nil
		})
		if v := metricValue(t, reg, "outboxrelay_oldest_unsent_age_seconds", ""); v <= 0 {
			t.Errorf("oldest unsent age %v, want > 0", v)
		}
		if v := metricValue(t, reg, "outboxrelay_publishes_total", "ok"); v < float64(len(good)) {
			t.Errorf("publishes ok %v, want >= %d", v, len(good))
		}
		// A publish to a subject no stream listens on fails with no
		// responders (error) or, where the account routes the subject
		// nowhere, times out (unknown).
		natstest.WaitFor(t, 10*time.Second, func() error {
			failed := metricValue(t, reg, "outboxrelay_publishes_total", "error") + metricValue(t, reg, "outboxrelay_publishes_total", "unknown")
			if failed < 1 {
				return fmt.Errorf("no failed publish counted yet; counts %+v", r.Counts())
			}
			return nil
		})
		metricValue(t, reg, "outboxrelay_publishes_total", "duplicate")
		if v := metricValue(t, reg, "outboxrelay_leader", ""); v != 1 {
			t.Errorf("leader gauge %v, want 1", v)
		}
		checkDelivered(t, fx.readStream(t, topic), good, false)
	})
}
