package prometheus

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/daemon/daemontest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/platform/catalog/catalogtest"
	"github.com/msgplatform/platform/tenancy"
)

// Canaries for a tenant's topics and queues. Tenant acme
// (publish-rate quota 2 events/s, policy reject) has topic payments (4
// partitions, groups ledger and frozen), queue tasks and topic muted,
// which opts out. Its services run on a platform service connection to
// its account (the runtime recognises canaries by header). The canary
// age of its groups is exported labelled tenant="acme" under the tenant's
// own names; it stays fresh while a group processes and grows past the
// tolerance when group frozen blocks on one event while its offset lag
// stays a handful. Canaries bypass the ingest: with ~20 canaries/s
// against a quota of 2/s nothing is rejected, throttled or counted as the
// tenant's accepted publishes, and no canary reaches a handler.
func TestCanaryTenantTopicDetectsStalledGroup(t *testing.T) {
	d, cfg := startCanaryDaemon(t)
	tolerance := cfg.Canary.EffectiveTolerance()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	m := d.Tenants()
	spec := tenancy.DefaultSpec("acme")
	spec.Quota.PublishRate, spec.Quota.Policy = 2, tenancy.PolicyReject
	if _, err := m.Create(ctx, "test", spec); err != nil {
		t.Fatal(err)
	}
	payments, muted, tasks := catalogtest.CanaryObjects("payments", "muted", "tasks")
	for _, ts := range []platform.TopicSpec{payments, muted} {
		if _, err := m.ApplyTopic(ctx, "test", "acme", ts, catalog.ApplyOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := m.ApplyQueue(ctx, "test", "acme", tasks, catalog.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"ledger", "frozen"} {
		if _, err := m.ApplyGroup(ctx, "test", "acme", platform.GroupSpec{Name: g, Topic: "payments"}, catalog.ApplyOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	js := (&daemontest.Daemon{Daemon: d, Config: cfg}).TenantJetStream(t, ctx, "acme", "test-acme")
	rig := startCanaryHandlers(ctx, t, js, []string{"ledger", "frozen"}, "frozen", "pay:stuck", tenancy.StoredName("tasks"), "tasks")
	unfreeze := rig.release

	const ageName, tolName = "platform_canary_age_seconds", "platform_canary_tolerance_seconds"
	ledgerL := "group=ledger,tenant=acme,topic=payments"
	frozenL := "group=frozen,tenant=acme,topic=payments"
	tasksL := "group=tasks,tenant=acme,topic=tasks"
	waitAgesBelow(t, d, 20*time.Second, tolerance, ledgerL, frozenL, tasksL)

	// Group frozen blocks on one event; four more follow it.
	stalledAt := publishStall(ctx, t, js, tenancy.StoredName("payments"), "p", "pay:")
	samples := waitStalled(t, d, 20*time.Second, tolerance, "frozen", frozenL)
	lag := tenantGroupLag(ctx, t, js, tenancy.StreamName("payments"), "frozen")
	t.Logf("%.1fs after the stall: frozen canary age %.2fs, offset lag %d; ledger canary age %.2fs; tolerance %s",
		time.Since(stalledAt).Seconds(), samples[ageName][frozenL], lag, samples[ageName][ledgerL], tolerance)
	if lag == 0 || lag > 5 {
		t.Errorf("frozen group's offset lag is %d events, want a handful (1..5)", lag)
	}
	for _, l := range []string{ledgerL, tasksL} {
		if a := samples[ageName][l]; a > tolerance.Seconds() {
			t.Errorf("%s canary age %.2fs, past the tolerance %s", l, a, tolerance)
		}
	}
	if fired := canaryAlert(t, samples); !canaryContains(fired, "payments/frozen") || canaryContains(fired, "payments/ledger") || canaryContains(fired, "tasks/tasks") {
		t.Errorf("PlatformCanaryMissing fires for %v, want payments/frozen and not ledger or tasks (ages %v)", fired, samples[ageName])
	}
	var tenantAges int
	for _, a := range d.CanaryAges() {
		if a.Tenant == "acme" {
			tenantAges++
			if a.Topic == "muted" {
				t.Errorf("opted-out topic muted has a canary age: %+v", a)
			}
		}
	}
	if tenantAges != 3 {
		t.Errorf("CanaryAges: %d of tenant acme, want 3 (%+v)", tenantAges, d.CanaryAges())
	}

	// The healthy group's canary age stays about one interval.
	var worst float64
	for range 8 {
		time.Sleep(canaryInterval / 3)
		s := scrape(t, d, ageName)[ageName]
		worst = max(worst, s[ledgerL], s[tasksL])
	}
	if worst > tolerance.Seconds() {
		t.Errorf("a processing tenant group's canary age reached %.3fs, past the tolerance %s", worst, tolerance)
	}

	// Unfrozen, the group catches up.
	unfreeze()
	natstest.WaitFor(t, 20*time.Second, func() error {
		if a := scrape(t, d, ageName)[ageName][frozenL]; a > tolerance.Seconds() {
			return fmt.Errorf("frozen group's canary age still %.2fs", a)
		}
		return nil
	})

	// Canaries are not the tenant's traffic: not through its ingest, so
	// not against its publish-rate quota nor in its accepted publishes.
	stored, err := js.Stream(ctx, tenancy.StreamName("payments"))
	if err != nil {
		t.Fatal(err)
	}
	us, err := m.Usage(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	u := us[0]
	t.Logf("payments holds %d events (5 test events, the rest canaries); usage %+v", stored.CachedInfo().State.Msgs, u)
	if stored.CachedInfo().State.Msgs < 5+4*4 {
		t.Errorf("payments holds %d events, want the 5 test events and several rounds of 4 canaries", stored.CachedInfo().State.Msgs)
	}
	if u.MsgsIn != 0 || u.Rejected != 0 || u.Throttled != 0 || u.Dropped != 0 {
		t.Errorf("canaries counted as the tenant's publishes: msgs_in %d, rejected %d, throttled %d, dropped %d", u.MsgsIn, u.Rejected, u.Throttled, u.Dropped)
	}
	if q, err := js.Stream(ctx, tenancy.StreamName("muted")); err != nil || q.CachedInfo().State.Msgs != 0 {
		t.Errorf("topic muted opted out but holds canaries (%v)", err)
	}
	if seen := rig.reached(); len(seen) > 0 {
		t.Errorf("canaries reached handlers: %v", seen)
	}
}

// tenantGroupLag is a group's offset lag on a topic's stream: events not yet
// delivered plus delivered and not acknowledged, over its partitions.
func tenantGroupLag(ctx context.Context, t *testing.T, js jetstream.JetStream, stream, group string) uint64 {
	t.Helper()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	var lag uint64
	l := s.ListConsumers(ctx)
	for ci := range l.Info() {
		if isPartitionConsumerOf(ci.Name, group) {
			lag += ci.NumPending + uint64(ci.NumAckPending)
		}
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	return lag
}

func isPartitionConsumerOf(consumer, group string) bool {
	for p := range 64 {
		if consumer == platform.PartitionConsumer(group, p) {
			return true
		}
	}
	return false
}

func canaryContains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
