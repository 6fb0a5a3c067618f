package prometheus

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"

	"github.com/msgplatform/platform/conf"
	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/daemon"
	"github.com/msgplatform/platform/internal/daemon/daemontest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/canary"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/platform/catalog/catalogtest"
	"github.com/msgplatform/platform/platform/consumer"
)

const canaryInterval = 250 * time.Millisecond

// startCanaryDaemon runs a one-node platformd publishing a canary every
// canaryInterval, with topic orders (4 partitions, groups healthy and
// stuck), queue jobs, and topic quiet, which opts out.
func startCanaryDaemon(t *testing.T) (*daemon.Daemon, *conf.Config) {
	t.Helper()
	cfg := conf.DefaultConfig()
	cfg.Fabric.Nodes, cfg.Fabric.Port, cfg.Fabric.ClusterPort = 1, -1, -1
	cfg.Fabric.DataDir = ""
	cfg.Fabric.LameDuck = 200 * time.Millisecond
	cfg.Fabric.Durability.Replicas = 1
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.Canary = canary.Config{Interval: canaryInterval}
	orders, quiet, jobs := catalogtest.CanaryObjects("orders", "quiet", "jobs")
	cfg.Catalog = platform.Catalog{
		Topics: map[string]platform.TopicSpec{"orders": orders, "quiet": quiet},
		Queues: map[string]platform.QueueSpec{"jobs": jobs},
		Groups: map[string]platform.GroupSpec{
			"healthy": {Name: "healthy", Topic: "orders"},
			"stuck":   {Name: "stuck", Topic: "orders"},
		},
	}
	return daemontest.StartRetrying(t, slog.New(slog.NewTextHandler(io.Discard, nil)), func() conf.Config {
		c := cfg
		c.DataDir = t.TempDir()
		return c
	})
}

// scrape returns the daemon's /metrics samples named name, keyed by their
// labels ("group=stuck,topic=orders").
func scrape(t *testing.T, d *daemon.Daemon, names ...string) map[string]map[string]float64 {
	t.Helper()
	_, body := daemontest.HTTPGet(t, d, "/metrics")
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	out := map[string]map[string]float64{}
	for _, name := range names {
		out[name] = map[string]float64{}
		mf := fams[name]
		if mf == nil {
			continue
		}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(ls)
			out[name][strings.Join(ls, ",")] = m.GetGauge().GetValue()
		}
	}
	return out
}

// canaryAlert evaluates the PlatformCanaryMissing rule of rules.yaml on
// the scraped canary series and returns the groups it fires for.
func canaryAlert(t *testing.T, samples map[string]map[string]float64) []string {
	t.Helper()
	rgs, errs := rulefmt.ParseFile("rules.yaml", false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var expr string
	for _, g := range rgs.Groups {
		for _, r := range g.Rules {
			if r.Alert == "PlatformCanaryMissing" {
				expr = r.Expr
			}
		}
	}
	if expr == "" {
		t.Fatal("rules.yaml has no PlatformCanaryMissing")
	}
	var load strings.Builder
	load.WriteString("load 1m\n")
	for name, series := range samples {
		for labels, v := range series {
			var sel []string
			for _, kv := range strings.Split(labels, ",") {
				if k, val, ok := strings.Cut(kv, "="); ok {
					sel = append(sel, fmt.Sprintf("%s=%q", k, val))
				}
			}
			fmt.Fprintf(&load, "  %s{%s} %gx5\n", name, strings.Join(sel, ","), v)
		}
	}
	engine := promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery)
	st := promqltest.LoadedStorage(t, load.String())
	q, err := engine.NewInstantQuery(context.Background(), st, nil, expr, time.Unix(0, 0).Add(5*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	res := q.Exec(context.Background())
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	v, err := res.Vector()
	if err != nil {
		t.Fatal(err)
	}
	var fired []string
	for _, s := range v {
		fired = append(fired, s.Metric.Get("topic")+"/"+s.Metric.Get("group"))
	}
	sort.Strings(fired)
	return fired
}

// A stalled group is detected by the canary while its
// offset lag stays small. Group stuck's handler blocks on one event; the
// runtime keeps acking everything else (other keys, and the canaries
// themselves), so its lag is a handful of events, but its ack floor stops
// below the stuck event, its canary age grows past the tolerance and the
// shipped PlatformCanaryMissing rule fires for it alone. Group healthy's
// canary age stays about one interval. No canary reaches a handler.
func TestCanaryDetectsStalledGroupWithSmallLag(t *testing.T) {
	d, cfg := startCanaryDaemon(t)
	tolerance := cfg.Canary.EffectiveTolerance()
	nc, js := natstest.Connect(t, d.Nodes()[0].ClientURL(), nats.UserCredentials(filepath.Join(cfg.DataDir, "creds", "admin.creds")))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	rig := startCanaryHandlers(ctx, t, js, []string{"healthy", "stuck"}, "stuck", "order:stuck", "jobs", "jobs")
	stopStuck := rig.release

	const ageName, tolName = "platform_canary_age_seconds", "platform_canary_tolerance_seconds"
	healthyL, stuckL, jobsL := "group=healthy,topic=orders", "group=stuck,topic=orders", "group=jobs,topic=jobs"
	// Both groups and the queue process canaries.
	waitAgesBelow(t, d, 15*time.Second, tolerance, healthyL, stuckL, jobsL)

	// Group stuck blocks on one event; four more events follow it.
	stalledAt := publishStall(ctx, t, js, "orders", "e", "order:")
	samples := waitStalled(t, d, 15*time.Second, tolerance, "stuck", stuckL)
	var st catalog.TopicStatus
	if err := control.Call(ctx, nc, control.SubjTopicDescribe, control.NameRequest{Name: "orders"}, &st); err != nil {
		t.Fatal(err)
	}
	var lag uint64
	for _, g := range st.Groups {
		if g.Name == "stuck" {
			lag = g.Pending
		}
	}
	t.Logf("%.1fs after the stall: stuck canary age %.2fs, offset lag %d; healthy canary age %.2fs; tolerance %s",
		time.Since(stalledAt).Seconds(), samples[ageName][stuckL], lag, samples[ageName][healthyL], tolerance)
	if lag == 0 || lag > 5 {
		t.Errorf("stuck group's offset lag is %d events, want a handful (1..5)", lag)
	}
	if fired := canaryAlert(t, samples); len(fired) != 1 || fired[0] != "orders/stuck" {
		t.Errorf("PlatformCanaryMissing fires for %v, want [orders/stuck] (ages %v)", fired, samples[ageName])
	}
	if got := samples[tolName][""]; got != tolerance.Seconds() {
		t.Errorf("%s = %v, want %v", tolName, got, tolerance.Seconds())
	}
	if ages := d.CanaryAges(); len(ages) != 3 {
		t.Errorf("CanaryAges: %+v", ages)
	}

	// The healthy group's canary age stays about one interval.
	var worst, sum float64
	const n = 12
	for range n {
		time.Sleep(canaryInterval / 3)
		s := scrape(t, d, ageName)[ageName]
		for _, l := range []string{healthyL, jobsL} {
			worst = max(worst, s[l])
		}
		sum += s[healthyL]
	}
	t.Logf("healthy canary age over %d scrapes: mean %.3fs, worst %.3fs (interval %s)", n, sum/n, worst, canaryInterval)
	if worst > tolerance.Seconds() {
		t.Errorf("a healthy group's canary age reached %.3fs, past the tolerance %s", worst, tolerance)
	}

	// Unstuck, the group catches up and the alert clears.
	stopStuck()
	natstest.WaitFor(t, 15*time.Second, func() error {
		s := scrape(t, d, ageName, tolName)
		if fired := canaryAlert(t, s); len(fired) > 0 {
			return fmt.Errorf("still firing for %v", fired)
		}
		return nil
	})
	if seen := rig.reached(); len(seen) > 0 {
		t.Errorf("canaries reached handlers: %v", seen)
	}
	if q, err := js.Stream(ctx, "quiet"); err != nil || q.CachedInfo().State.Msgs != 0 {
		t.Errorf("topic quiet opted out but holds canaries (%v)", err)
	}
}

// waitAgesBelow waits up to within for the canary ages of labels to be
// exported and below tolerance.
func waitAgesBelow(t *testing.T, d *daemon.Daemon, within, tolerance time.Duration, labels ...string) {
	t.Helper()
	natstest.WaitFor(t, within, func() error {
		ages := scrape(t, d, "platform_canary_age_seconds")["platform_canary_age_seconds"]
		for _, l := range labels {
			if a, ok := ages[l]; !ok || a > tolerance.Seconds() {
				return fmt.Errorf("canary ages %v: want %s below %s", ages, l, tolerance)
			}
		}
		return nil
	})
}

// publishStall publishes to topic the event with key keyPrefix+"stuck" a
// stuck group blocks on and four more after it (ids idPrefix+0..4), and
// returns when it is done.
func publishStall(ctx context.Context, t *testing.T, js jetstream.JetStream, topic, idPrefix, keyPrefix string) time.Time {
	t.Helper()
	pub := platform.NewPublisher(js, platform.PublisherOptions{})
	for i, key := range []string{"stuck", "1", "2", "3", "4"} {
		if _, err := pub.Publish(ctx, platform.Event{ID: fmt.Sprintf("%s%d", idPrefix, i), Topic: topic, Key: keyPrefix + key}); err != nil {
			t.Fatal(err)
		}
	}
	return time.Now()
}

// waitStalled waits up to within for the canary age of group (label) to
// pass twice the tolerance and returns the age and tolerance samples then.
func waitStalled(t *testing.T, d *daemon.Daemon, within, tolerance time.Duration, group, label string) map[string]map[string]float64 {
	t.Helper()
	const ageName, tolName = "platform_canary_age_seconds", "platform_canary_tolerance_seconds"
	var samples map[string]map[string]float64
	natstest.WaitFor(t, within, func() error {
		samples = scrape(t, d, ageName, tolName)
		if a := samples[ageName][label]; a <= 2*tolerance.Seconds() {
			return fmt.Errorf("%s group's canary age %.2fs, want > 2 x tolerance %s", group, a, tolerance)
		}
		return nil
	})
	return samples
}

// canaryHandlers are the consumers of a canary test: one member of each
// group on the topic its groups read, and workers of a queue.
type canaryHandlers struct {
	mu      sync.Mutex
	seen    []string // canaries that reached a handler: none should
	release func()   // unblocks the stuck group
}

func (h *canaryHandlers) reached() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.seen)
}

// started starts c within ctx, failing the test if it does not start, and
// closes it when the test ends.
func started(ctx context.Context, t *testing.T, c interface {
	Start(context.Context) error
	Close(context.Context) error
}) {
	t.Helper()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
}

// startCanaryHandlers starts a member of each group (through js) and
// workers of queue (recorded as label); group stuck blocks on the event
// with key stuckKey until release is called (at the latest when the test
// ends, before the members close).
func startCanaryHandlers(ctx context.Context, t *testing.T, js jetstream.JetStream, groups []string, stuck, stuckKey, queue, label string) *canaryHandlers {
	t.Helper()
	h := &canaryHandlers{}
	blocked := make(chan struct{})
	var once sync.Once
	h.release = func() { once.Do(func() { close(blocked) }) }
	note := func(s string) {
		h.mu.Lock()
		h.seen = append(h.seen, s)
		h.mu.Unlock()
	}
	for _, g := range groups {
		m, err := consumer.NewMember(js, consumer.MemberConfig{Group: g, Heartbeat: 100 * time.Millisecond, DrainTimeout: time.Second},
			func(ctx context.Context, msg *consumer.Message) error {
				if msg.Canary() {
					note(g + " " + msg.Subject)
				}
				if g == stuck && msg.Key == stuckKey {
					select {
					case <-blocked:
					case <-ctx.Done():
					}
				}
				return nil
			})
		if err != nil {
			t.Fatal(err)
		}
		started(ctx, t, m)
	}
	t.Cleanup(h.release) // runs before the members close
	w, err := consumer.NewWorkers(js, consumer.WorkersConfig{Queue: queue}, func(_ context.Context, msg *consumer.Message) error {
		note(label + " " + msg.Subject)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	started(ctx, t, w)
	return h
}
