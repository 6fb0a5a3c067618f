package metrics_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/metrics"
	"github.com/msgplatform/platform/internal/metrics/metricstest"
)

// hasLeader returns platform_stream_has_leader for stream, one value per
// reporting server.
func hasLeader(t *testing.T, reg *prometheus.Registry, stream string) (map[string]float64, error) {
	t.Helper()
	return gauge(reg, "platform_stream_has_leader", stream)
}

// gauge returns the gauge name for stream, by reporting server.
func gauge(reg *prometheus.Registry, name, stream string) (map[string]float64, error) {
	samples, err := metricstest.Samples(reg, name, "stream", stream)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, s := range samples {
		out[s.Labels["server"]] = s.Value
	}
	return out, nil
}

// A stream with a leader is reported once, by its leader, with 1; once a
// majority of its replicas is gone the survivor reports 0 (no node leads
// it, so only a replica can say so), and the under-replication figures
// count the missing peers from the cluster view even though Jsz leaves
// the stream config out.
func TestStreamHasLeaderAndLostQuorum(t *testing.T) {
	f := natstest.RunFabric(t, 3)
	js := f.JetStream()
	ctx := natstest.Context(t, 60*time.Second)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "orders", Subjects: []string{"orders.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	f.WaitReplicasCurrent(js, "orders")

	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewNATSCollector(func() []metrics.Server {
		var out []metrics.Server
		for _, n := range f.Nodes() {
			out = append(out, metrics.Server{Srv: n.Server(), Region: "local"})
		}
		return out
	}))
	var leader string
	natstest.WaitFor(t, 20*time.Second, func() error {
		v, err := hasLeader(t, reg, "orders")
		if err != nil {
			return err
		}
		if len(v) != 1 {
			return fmt.Errorf("has_leader series %v, want exactly one (from the leader)", v)
		}
		for srv, x := range v {
			if x != 1 {
				return fmt.Errorf("has_leader %v, want 1", v)
			}
			leader = srv
		}
		return nil
	})
	idx := map[string]int{}
	for i, n := range f.Nodes() {
		idx[n.Server().Name()] = i
	}
	li := idx[leader]
	follower, survivor := (li+1)%3, (li+2)%3

	// One follower down: the leader reports one replica lagging.
	f.Kill(follower)
	natstest.WaitFor(t, 30*time.Second, func() error {
		if v, err := gauge(reg, "platform_stream_replicas_lagging", "orders"); err != nil || v[leader] != 1 {
			return fmt.Errorf("replicas_lagging %v (%v), want %s: 1", v, err, leader)
		}
		return nil
	})

	// The leader down too: nobody leads, the survivor reports 0.
	f.Kill(li)
	name := f.Node(survivor).Server().Name()
	natstest.WaitFor(t, 45*time.Second, func() error {
		v, err := hasLeader(t, reg, "orders")
		if err != nil {
			return err
		}
		if got, ok := v[name]; !ok || got != 0 || len(v) != 1 {
			return fmt.Errorf("has_leader %v, want %s: 0 only", v, name)
		}
		return nil
	})
}
