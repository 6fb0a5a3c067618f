package catalog

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/validate"
	"github.com/msgplatform/platform/platform"
)

// The HarborCart catalog is created as specified, and applying it again
// changes nothing and sends no create/update/delete request.
func TestApplyCreatesThenIsIdempotent(t *testing.T) {
	t.Parallel()
	r, rec, js, ctx := onFabric(t, 3)
	cat := harborCart()

	dry, err := r.Apply(ctx, cat, ApplyOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(dry) != 5 || len(rec.writes()) != 0 {
		t.Fatalf("dry run: %d changes, writes %v", len(dry), rec.writes())
	}
	if _, err := js.Stream(ctx, "orders"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("dry run created the stream: %v", err)
	}

	changes := applyWant(t, ctx, r, cat, ActionCreate, "first apply")
	if got := []string{changes[0].Name, changes[1].Name, changes[2].Name}; got[0] != "orders" || got[1] != "shipment-jobs" || got[2] != "email-notifier" {
		t.Errorf("changes not in topic, queue, group order: %v", got)
	}

	// The topic's stream.
	sc := natstest.StreamConfig(t, js, "orders")
	if len(sc.Subjects) != 1 || sc.Subjects[0] != "orders.*" ||
		sc.SubjectTransform == nil || sc.SubjectTransform.Destination != "orders.{{partition(24,1)}}.{{wildcard(1)}}" ||
		sc.Replicas != 3 || sc.Storage != jetstream.FileStorage || sc.Discard != jetstream.DiscardOld ||
		!sc.AllowDirect || sc.Duplicates != 2*time.Minute || sc.MaxAge != 72*time.Hour {
		t.Errorf("orders stream config: %+v", sc)
	}
	for k, v := range map[string]string{"platform.kind": "topic", "platform.partitions": "24", "platform.key": "order:<orderId>", "platform.owner": "checkout"} {
		if sc.Metadata[k] != v {
			t.Errorf("orders metadata %s = %q, want %q", k, sc.Metadata[k], v)
		}
	}
	// Every group has exactly one pinned consumer per partition.
	s, err := js.Stream(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	perGroup := map[string]int{}
	l := s.ListConsumers(ctx)
	for ci := range l.Info() {
		g := ci.Config.Metadata["platform.group"]
		perGroup[g]++
		p := ci.Config.Metadata["platform.partition"]
		if ci.Config.FilterSubject != "orders."+p+".*" || ci.Config.PriorityPolicy != jetstream.PriorityPolicyPinned ||
			len(ci.Config.PriorityGroups) != 1 || ci.Config.PriorityGroups[0] != g || ci.Config.PinnedTTL != 2*time.Minute ||
			ci.Config.AckPolicy != jetstream.AckExplicitPolicy || ci.Config.DeliverPolicy != jetstream.DeliverAllPolicy ||
			ci.Config.MaxAckPending != 1000 || ci.Config.AckWait != 30*time.Second {
			t.Errorf("consumer %s config: %+v", ci.Name, ci.Config)
		}
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"email-notifier", "sales-analytics", "fraud-monitor"} {
		if perGroup[g] != 24 {
			t.Errorf("group %s has %d consumers, want 24", g, perGroup[g])
		}
	}
	// The queue's stream and consumer.
	qc := natstest.StreamConfig(t, js, "shipment-jobs")
	if qc.Retention != jetstream.WorkQueuePolicy || qc.Subjects[0] != "shipment-jobs.>" || !qc.AllowDirect || qc.Metadata["platform.lease"] != "1m0s" {
		t.Errorf("queue stream config: %+v", qc)
	}
	cc := natstest.ConsumerConfig(t, js, "shipment-jobs", platform.QueueConsumer)
	if cc.AckWait != time.Minute || cc.MaxDeliver != 5 || cc.AckPolicy != jetstream.AckExplicitPolicy {
		t.Errorf("queue consumer config: %+v", cc)
	}

	rec.reset()
	again, err := r.Apply(ctx, cat, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range again {
		if c.Action != ActionUnchanged || len(c.Details) != 0 {
			t.Errorf("second apply: %s", c)
		}
	}
	if w := rec.writes(); len(w) != 0 {
		t.Errorf("second apply sent write requests: %v", w)
	}

	// A real change is an update with a readable diff, and only that.
	changed := clone(cat)
	o := changed.Topics["orders"]
	o.Retention.MaxAge = 24 * time.Hour
	changed.Topics["orders"] = o
	got, err := r.Apply(ctx, changed, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a := actions(got); a["topic orders"] != ActionUpdate || a["queue shipment-jobs"] != ActionUnchanged || a["group email-notifier"] != ActionUnchanged {
		t.Errorf("retention change: %v", a)
	}
	if d := got[0].Details; len(d) != 1 || d[0] != "retention.max_age: 72h0m0s -> 24h0m0s" {
		t.Errorf("retention change details: %q", d)
	}
	if sc := natstest.StreamConfig(t, js, "orders"); sc.MaxAge != 24*time.Hour || sc.Metadata["_nats.ver"] == "" {
		t.Errorf("after update: max_age %s, metadata %v", sc.MaxAge, sc.Metadata)
	}
}

// A partition change is refused with ErrConflict, and nothing in its
// catalog is applied, not even the valid changes beside it.
func TestApplyRefusesPartitionChange(t *testing.T) {
	t.Parallel()
	r, rec, js, ctx := onFabric(t, 3)
	cat := harborCart()
	applyWant(t, ctx, r, cat, ActionCreate, "first apply")
	before := natstest.StreamConfig(t, js, "orders")

	// Alone.
	o := cat.Topics["orders"]
	o.Partitions = 48
	_, err := r.ApplyTopic(ctx, o, ApplyOptions{})
	const want = "topics.orders.partitions: changing 24 -> 48 would move keys to other partitions and break per-key order; create a new topic (e.g. orders-v2) with 48 partitions and migrate consumers, or drain the backlog first"
	if !errors.Is(err, platform.ErrConflict) || !strings.Contains(err.Error(), want) {
		t.Fatalf("ApplyTopic: %v\nwant ErrConflict with %q", err, want)
	}

	// In a catalog with valid changes: a new topic, a new group, a lease
	// change, a retention change on the same topic.
	rec.reset()
	bad := clone(cat)
	o.Retention.MaxAge = time.Hour
	bad.Topics["orders"] = o
	bad.Topics["payments"] = platform.DefaultTopicSpec("payments")
	bad.Groups["ledger"] = platform.GroupSpec{Name: "ledger", Topic: "payments"}
	q := bad.Queues["shipment-jobs"]
	q.Lease = 5 * time.Minute
	bad.Queues["shipment-jobs"] = q
	for _, dry := range []bool{true, false} {
		changes, err := r.Apply(ctx, bad, ApplyOptions{DryRun: dry})
		if !errors.Is(err, platform.ErrConflict) || !strings.Contains(err.Error(), want) || changes != nil {
			t.Fatalf("Apply(dry=%v): %v, %v", dry, changes, err)
		}
		var verr *validate.Error
		if !errors.As(err, &verr) || len(verr.Problems) != 1 || !verr.Has("topics.orders.partitions") {
			t.Errorf("problems: %v", err)
		}
	}
	if w := rec.writes(); len(w) != 0 {
		t.Errorf("refused catalog sent write requests: %v", w)
	}
	if _, err := js.Stream(ctx, "payments"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("payments created: %v", err)
	}
	after := natstest.StreamConfig(t, js, "orders")
	if after.MaxAge != before.MaxAge || after.SubjectTransform.Destination != before.SubjectTransform.Destination || after.Metadata["platform.partitions"] != "24" {
		t.Errorf("orders changed: %+v", after)
	}
	if cc := natstest.ConsumerConfig(t, js, "shipment-jobs", platform.QueueConsumer); cc.AckWait != time.Minute {
		t.Errorf("queue lease applied: %s", cc.AckWait)
	}
}

// Lowering replicas below 3 needs AllowReducedReplicas; with it the
// stream and its group consumers follow.
func TestApplyReducedReplicas(t *testing.T) {
	t.Parallel()
	r, _, js, ctx := onFabric(t, 3)
	cat := harborCart()
	applyWant(t, ctx, r, cat, ActionCreate, "first apply")
	low := clone(cat)
	o := low.Topics["orders"]
	o.Replicas = 1
	low.Topics["orders"] = o
	q := low.Queues["shipment-jobs"]
	q.Replicas = 1
	low.Queues["shipment-jobs"] = q

	_, err := r.Apply(ctx, low, ApplyOptions{})
	var verr *validate.Error
	if !errors.Is(err, platform.ErrConflict) || !errors.As(err, &verr) || !verr.Has("topics.orders.replicas") || !verr.Has("queues.shipment-jobs.replicas") ||
		!strings.Contains(err.Error(), "lowering 3 -> 1") || !strings.Contains(err.Error(), "--allow-reduced-replicas") ||
		!strings.Contains(err.Error(), "allow_reduced_replicas: true") {
		t.Fatalf("want ErrConflict naming both objects and the flag, got %v", err)
	}
	if sc := natstest.StreamConfig(t, js, "orders"); sc.Replicas != 3 {
		t.Fatalf("replicas changed to %d", sc.Replicas)
	}
	// 3 -> 5 is not a reduction, but needs 5 servers: not tested here.

	changes, err := r.Apply(ctx, low, ApplyOptions{AllowReducedReplicas: true})
	if err != nil {
		t.Fatal(err)
	}
	if a := actions(changes); a["topic orders"] != ActionUpdate || a["queue shipment-jobs"] != ActionUpdate || a["group fraud-monitor"] != ActionUnchanged {
		t.Errorf("actions: %v", a)
	}
	if sc := natstest.StreamConfig(t, js, "orders"); sc.Replicas != 1 {
		t.Errorf("orders replicas %d, want 1", sc.Replicas)
	}
	if sc := natstest.StreamConfig(t, js, "shipment-jobs"); sc.Replicas != 1 {
		t.Errorf("shipment-jobs replicas %d, want 1", sc.Replicas)
	}
	// Consumers inherit the stream's replicas (config 0): they scale down
	// with it.
	natstest.WaitFor(t, 20*time.Second, func() error {
		// While a consumer moves, its info request may go unanswered.
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		c, err := js.Consumer(cctx, "orders", platform.PartitionConsumer("fraud-monitor", 3))
		if err != nil {
			return err
		}
		if n := len(c.CachedInfo().Cluster.Replicas); n != 0 {
			return errors.New("consumer still has followers")
		}
		return nil
	})
	applyWant(t, ctx, r, low, ActionUnchanged, "after reduction, re-apply")
}

// Invalid specs fail before anything is read, each problem named by key.
func TestApplyRejectsBadSpecs(t *testing.T) {
	r := NewReconciler(nil, ReconcilerOptions{}) // never reaches JetStream
	ctx := natstest.Context(t, 5*time.Second)
	bad := platform.Catalog{
		Topics: map[string]platform.TopicSpec{
			"orders": {Name: "orders", Partitions: 0, Replicas: 3, Retention: platform.Retention{MaxAge: time.Hour}},
			"Bad":    {Name: "Bad", Partitions: 2000, Replicas: 9},
		},
		Queues: map[string]platform.QueueSpec{
			"jobs":  {Name: "jobs", Lease: 0, MaxAttempts: 0},
			"o":     platform.DefaultQueueSpec("o"),
			"o.sub": platform.DefaultQueueSpec("o.sub"),
		},
		Groups: map[string]platform.GroupSpec{"g": {Name: "g", Topic: "missing"}},
	}
	_, err := r.Apply(ctx, bad, ApplyOptions{})
	if !errors.Is(err, platform.ErrInvalidSpec) {
		t.Fatalf("want ErrInvalidSpec, got %v", err)
	}
	for _, want := range []string{
		"topics.orders.partitions: must be 1..1024, got 0",
		"topics.Bad.name: must be",
		"topics.Bad.partitions: must be 1..1024, got 2000",
		"topics.Bad.replicas: must be 1..5, got 9",
		"topics.Bad.retention: set max_age and/or max_bytes",
		"queues.jobs.lease: must be 1s..12h, got 0s",
		"queues.jobs.max_attempts: must be 1..1000, got 0",
		"queues.o.name: its subjects o.> would also take those of queue \"o.sub\"",
		"groups.g.topic: no topic \"missing\" is declared",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	// Replicas 0 takes the default and is valid.
	if strings.Contains(err.Error(), "queues.jobs.replicas") {
		t.Errorf("replicas 0 should default: %v", err)
	}
	if _, err := r.ApplyTopic(ctx, platform.TopicSpec{Name: "x"}, ApplyOptions{}); !errors.Is(err, platform.ErrInvalidSpec) || !strings.Contains(err.Error(), "topics.x.partitions: must be 1..1024, got 0") {
		t.Errorf("ApplyTopic: %v", err)
	}
	if _, err := r.ApplyGroup(ctx, platform.GroupSpec{Name: "G"}, ApplyOptions{}); !errors.Is(err, platform.ErrInvalidSpec) || !strings.Contains(err.Error(), "groups.G.name") || !strings.Contains(err.Error(), "groups.G.topic") {
		t.Errorf("ApplyGroup: %v", err)
	}
}

// Names taken by the other kind, by a stream the platform does not
// manage, or groups of missing topics are refused.
func TestApplyRefusesForeignAndMissing(t *testing.T) {
	t.Parallel()
	r, _, js, ctx := onFabric(t, 3)
	orders := platform.DefaultTopicSpec("orders")
	orders.Partitions = 8
	if _, err := r.ApplyTopic(ctx, orders, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ApplyQueue(ctx, platform.DefaultQueueSpec("jobs"), ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ApplyQueue(ctx, platform.DefaultQueueSpec("orders"), ApplyOptions{}); !errors.Is(err, platform.ErrConflict) || !strings.Contains(err.Error(), `queues.orders: "orders" is already a topic`) {
		t.Errorf("queue over topic: %v", err)
	}
	if _, err := r.ApplyTopic(ctx, platform.DefaultTopicSpec("jobs"), ApplyOptions{}); !errors.Is(err, platform.ErrConflict) || !strings.Contains(err.Error(), `topics.jobs: "jobs" is already a queue`) {
		t.Errorf("topic over queue: %v", err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "legacy", Subjects: []string{"legacy.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.ApplyTopic(ctx, platform.DefaultTopicSpec("legacy"), ApplyOptions{}); !errors.Is(err, platform.ErrConflict) || !strings.Contains(err.Error(), `stream "legacy" already exists and is not managed by the platform`) {
		t.Errorf("topic over foreign stream: %v", err)
	}
	// A new stream whose subjects a foreign stream already takes.
	if _, err := r.ApplyTopic(ctx, platform.DefaultTopicSpec("legacy.eu"), ApplyOptions{}); !errors.Is(err, platform.ErrConflict) || !strings.Contains(err.Error(), `overlap those of stream "legacy"`) {
		t.Errorf("overlapping subjects: %v", err)
	}
	// More replicas than servers fails at once, saying so.
	big := platform.DefaultTopicSpec("big")
	big.Replicas = 5
	began := time.Now()
	if _, err := r.ApplyTopic(ctx, big, ApplyOptions{}); err == nil || !strings.Contains(err.Error(), "replicas 5 needs 5 JetStream servers") || time.Since(began) > 15*time.Second {
		t.Errorf("R5 on 3 servers: %v after %s", err, time.Since(began))
	}
	if _, err := r.ApplyGroup(ctx, platform.GroupSpec{Name: "g", Topic: "nope"}, ApplyOptions{}); !errors.Is(err, platform.ErrNotFound) || !strings.Contains(err.Error(), `groups.g.topic: no topic "nope" exists`) {
		t.Errorf("group of missing topic: %v", err)
	}
	if _, err := r.ApplyGroup(ctx, platform.GroupSpec{Name: "g", Topic: "jobs"}, ApplyOptions{}); !errors.Is(err, platform.ErrNotFound) {
		t.Errorf("group of a queue: %v", err)
	}
	ch, err := r.ApplyGroup(ctx, platform.GroupSpec{Name: "g", Topic: "orders"}, ApplyOptions{})
	if err != nil || ch.Action != ActionCreate {
		t.Fatalf("group of existing topic: %v %v", ch, err)
	}
	// A stray partition consumer of the group is removed; a missing one
	// is recreated.
	stray := platform.GroupConsumerConfig(platform.GroupSpec{Name: "g", Topic: "orders"}, 9)
	if _, err := js.CreateConsumer(ctx, "orders", stray); err != nil {
		t.Fatal(err)
	}
	ch, err = r.ApplyGroup(ctx, platform.GroupSpec{Name: "g", Topic: "orders"}, ApplyOptions{})
	if err != nil || ch.Action != ActionUpdate || len(ch.Details) != 1 || !strings.Contains(ch.Details[0], "delete consumer g-p9") {
		t.Fatalf("stray consumer: %v %v", ch, err)
	}
	if _, err := js.Consumer(ctx, "orders", "g-p9"); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Errorf("stray consumer kept: %v", err)
	}
	if err := js.DeleteConsumer(ctx, "orders", "g-p0"); err != nil {
		t.Fatal(err)
	}
	ch, err = r.ApplyGroup(ctx, platform.GroupSpec{Name: "g", Topic: "orders"}, ApplyOptions{})
	if err != nil || ch.Action != ActionUpdate || len(ch.Details) != 1 || ch.Details[0] != "create 1 missing partition consumer(s)" {
		t.Fatalf("missing consumer: %v %v", ch, err)
	}
	if _, err := js.Consumer(ctx, "orders", "g-p0"); err != nil {
		t.Errorf("missing consumer not recreated: %v", err)
	}
}
