package canary_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/canary"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/platform/catalog/catalogtest"
	"github.com/msgplatform/platform/platform/consumer"
)

// canaryAge returns the age record of topic/group, or fails.
func canaryAge(t *testing.T, c *canary.Monitor, topic, group string) canary.Age {
	t.Helper()
	for _, a := range c.Ages() {
		if a.Topic == topic && a.Group == group {
			return a
		}
	}
	t.Fatalf("no canary age for %s/%s in %+v", topic, group, c.Ages())
	return canary.Age{}
}

// The canary, driven slot by slot: canaries reach no handler, the runtime
// acks them, a group stuck on one event keeps a small lag while its canary
// age stays at the last canary before the stuck event, a restarted
// canary (no memory) finds the same answer in the stream, repeats from
// another platformd are stored once, and opted-out objects get nothing.
func TestCanaryMeasuresAckFloorsNotHandlers(t *testing.T) {
	t.Parallel()
	f := natstest.RunFabric(t, 1)
	js := f.JetStream()
	ctx := natstest.Context(t, 60*time.Second)
	orders, quiet, jobs := catalogtest.CanaryObjects("orders", "quiet", "jobs")
	cat := platform.Catalog{
		Topics: map[string]platform.TopicSpec{"orders": orders, "quiet": quiet},
		Queues: map[string]platform.QueueSpec{"jobs": jobs},
		Groups: map[string]platform.GroupSpec{"healthy": {Name: "healthy", Topic: "orders"}, "stuck": {Name: "stuck", Topic: "orders"}},
	}
	if _, err := catalog.NewReconciler(js, catalog.ReconcilerOptions{}).Apply(ctx, cat, catalog.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}

	metrics := consumer.NewMetrics()
	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics)
	var (
		mu         sync.Mutex
		canarySeen []string
		handled    = map[string]int{}
	)
	saw := func(who string, m *consumer.Message) {
		mu.Lock()
		defer mu.Unlock()
		if m.Canary() || strings.Contains(m.Subject, canary.KeyPrefix) || strings.HasSuffix(m.Subject, canary.QueueToken) {
			canarySeen = append(canarySeen, who+" "+m.Subject)
		}
		handled[who]++
	}
	release := make(chan struct{})
	for _, g := range []string{"healthy", "stuck"} {
		cfg := fastMember(g, g+"-1")
		cfg.Metrics = metrics
		startMember(t, js, cfg, func(ctx context.Context, m *consumer.Message) error {
			saw(g, m)
			if g == "stuck" && m.Key == "order:stuck" {
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			return nil
		})
	}
	startWorkers(t, ctx, js, consumer.WorkersConfig{Queue: "jobs", Metrics: metrics}, func(ctx context.Context, m *consumer.Message) error {
		saw("jobs", m)
		if m.Subject == "jobs.slow" {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the members and workers close

	c, err := canary.New(js, canary.Config{Interval: time.Minute}, natstest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	other, _ := canary.New(js, canary.Config{Interval: time.Minute}, nil) // a second platformd
	if err := c.CheckNow(ctx); err != nil {
		t.Fatal(err)
	}
	if len(c.Objects()) != 2 {
		t.Fatalf("canary objects %+v, want orders and jobs (quiet opted out)", c.Objects())
	}
	now := time.Now().Truncate(time.Minute)
	slot1, slot2 := now.Add(-10*time.Minute), now

	c.PublishSlot(ctx, slot1)
	other.PublishSlot(ctx, slot1) // repeats: stored once
	waitProcessed := func(c *canary.Monitor, topic, group string, slot time.Time) {
		t.Helper()
		natstest.WaitFor(t, 20*time.Second, func() error {
			if err := c.CheckNow(ctx); err != nil {
				return err
			}
			for _, a := range c.Ages() {
				if a.Topic == topic && a.Group == group && a.Processed.Equal(slot) && !a.LowerBound {
					return nil
				}
			}
			return fmt.Errorf("%s/%s: ages %+v, want processed %s", topic, group, c.Ages(), slot)
		})
	}
	waitProcessed(c, "orders", "healthy", slot1)
	waitProcessed(c, "orders", "stuck", slot1)
	waitProcessed(c, "jobs", "jobs", slot1)
	s, err := js.Stream(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if n := s.CachedInfo().State.Msgs; n != 4 {
		t.Fatalf("orders holds %d messages after two platformds published one slot, want 4 (one canary per partition)", n)
	}

	// The stuck group blocks on one event; a handful of other events and
	// the next canaries follow it.
	pub := platform.NewPublisher(js, platform.PublisherOptions{})
	stuckP := platform.PartitionOf("order:stuck", 4)
	if _, err := pub.Publish(ctx, platform.Event{ID: "e-stuck", Topic: "orders", Key: "order:stuck"}); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if _, err := pub.Publish(ctx, platform.Event{ID: "e" + strconv.Itoa(i), Topic: "orders", Key: "order:" + strconv.Itoa(i)}); err != nil {
			t.Fatal(err)
		}
	}
	// A long job holds the queue's ack floor; the workers still take
	// work, so the queue's canaries count as processed.
	if _, err := js.Publish(ctx, "jobs.slow", nil); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if handled["jobs"] == 0 {
			return fmt.Errorf("slow job not started")
		}
		return nil
	})
	c.PublishSlot(ctx, slot2)
	waitProcessed(c, "orders", "healthy", slot2)
	waitProcessed(c, "jobs", "jobs", slot2)
	// Every partition of the stuck group but one passes slot 2.
	natstest.WaitFor(t, 20*time.Second, func() error {
		st, err := catalog.NewReconciler(js, catalog.ReconcilerOptions{}).DescribeTopic(ctx, "orders")
		if err != nil {
			return err
		}
		for _, g := range st.Groups {
			if g.Name != "stuck" {
				continue
			}
			for _, p := range g.Partitions {
				if p.Partition != stuckP && p.Pending > 0 {
					return fmt.Errorf("stuck group partition %d pending %d", p.Partition, p.Pending)
				}
			}
			if g.Pending > 3 {
				return fmt.Errorf("stuck group pending %d", g.Pending)
			}
		}
		return nil
	})
	if err := c.CheckNow(ctx); err != nil {
		t.Fatal(err)
	}
	stuck := canaryAge(t, c, "orders", "stuck")
	if !stuck.Processed.Equal(slot1) || stuck.Partition != stuckP || !stuck.Stalled || stuck.LowerBound {
		t.Fatalf("stuck group: %+v, want processed %s on partition %d, stalled", stuck, slot1, stuckP)
	}
	if h := canaryAge(t, c, "orders", "healthy"); h.Stalled || !h.Processed.Equal(slot2) {
		t.Fatalf("healthy group: %+v", h)
	}

	// A restarted platformd has no memory: it finds the same answer in the
	// stream (the newest canary at or below each ack floor).
	fresh, _ := canary.New(js, canary.Config{Interval: time.Minute}, nil)
	if err := fresh.CheckNow(ctx); err != nil {
		t.Fatal(err)
	}
	if a := canaryAge(t, fresh, "orders", "stuck"); !a.Processed.Equal(slot1) || a.Partition != stuckP || a.LowerBound {
		t.Fatalf("after restart, stuck group: %+v, want processed %s on partition %d", a, slot1, stuckP)
	}
	if a := canaryAge(t, fresh, "orders", "healthy"); !a.Processed.Equal(slot2) {
		t.Fatalf("after restart, healthy group: %+v, want processed %s", a, slot2)
	}

	// The runtime acked canaries in both groups (its own view: the stuck
	// member is alive) and never handed one to a handler.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, mf := range mfs {
		if mf.GetName() != "platform_consumer_canary_processed_timestamp_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "group" {
					seen[l.GetValue()]++
				}
			}
			if ts := time.Unix(0, int64(m.GetGauge().GetValue()*1e9)); time.Since(ts) > time.Minute {
				t.Errorf("canary processed timestamp %s is not recent", ts)
			}
		}
	}
	if seen["healthy"] != 4 || seen["stuck"] != 4 || seen["jobs"] != 1 {
		t.Errorf("runtime canary records per group %v, want healthy 4, stuck 4, jobs 1", seen)
	}
	unblock()
	waitProcessed(c, "orders", "stuck", slot2)
	mu.Lock()
	if len(canarySeen) > 0 {
		t.Errorf("canaries reached handlers: %v", canarySeen)
	}
	if handled["healthy"] != 5 || handled["stuck"] != 5 || handled["jobs"] != 1 {
		t.Errorf("handled %v, want healthy 5, stuck 5, jobs 1", handled)
	}
	mu.Unlock()
	// Everyone is past slot 2: one canary per partition is remembered.
	for part, n := range c.Remembered() {
		if n != 1 {
			t.Errorf("%v remembers %d canaries, want 1", part, n)
		}
	}
	if q, err := js.Stream(ctx, "quiet"); err != nil || q.CachedInfo().State.Msgs != 0 {
		t.Errorf("opted-out topic quiet: %v", err)
	}
}

func fastMember(group, id string) consumer.MemberConfig {
	return consumer.MemberConfig{
		Group: group, ID: id, Heartbeat: 100 * time.Millisecond, TTL: 1200 * time.Millisecond,
		DrainTimeout: 2 * time.Second,
		Retry:        consumer.RetryPolicy{Delays: []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond}, MaxAttempts: 5},
	}
}

func startMember(t *testing.T, js jetstream.JetStream, cfg consumer.MemberConfig, h consumer.Handler) {
	t.Helper()
	m, err := consumer.NewMember(js, cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(natstest.Context(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
}

func startWorkers(t *testing.T, ctx context.Context, js jetstream.JetStream, cfg consumer.WorkersConfig, h consumer.Handler) {
	t.Helper()
	w, err := consumer.NewWorkers(js, cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Close(cctx)
	})
}
