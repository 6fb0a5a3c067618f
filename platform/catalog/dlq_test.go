package catalog

import (
	"testing"
	"time"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/platform"
)

// The Reconciler applies the DLQ retention and owner of the spec to the
// DLQ and advisory streams, and changes them in place on a later apply.
func TestApplyDLQRetentionAndOwner(t *testing.T) {
	t.Parallel()
	r, _, js, ctx := onFabric(t, 1)
	topic := platform.DefaultTopicSpec("payments")
	topic.Replicas, topic.Owner = 1, "checkout"
	topic.DLQ = platform.DLQSpec{Retention: 336 * time.Hour, Owner: "payments-oncall"}
	queue := platform.DefaultQueueSpec("shipment-jobs")
	queue.Replicas, queue.Owner = 1, "fulfilment"
	cat := platform.Catalog{Topics: map[string]platform.TopicSpec{"payments": topic}, Queues: map[string]platform.QueueSpec{"shipment-jobs": queue}}
	if _, err := r.Apply(ctx, cat, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	check := func(object string, age time.Duration, owner string) {
		t.Helper()
		for _, s := range []string{platform.DLQStream(object), platform.DLQEventsStream(object)} {
			cfg := natstest.StreamConfig(t, js, s)
			if cfg.MaxAge != age || cfg.Metadata[platform.MetaOwner] != owner {
				t.Errorf("%s: max_age %s owner %q, want %s %q", s, cfg.MaxAge, cfg.Metadata[platform.MetaOwner], age, owner)
			}
		}
	}
	check("payments", 336*time.Hour, "payments-oncall")
	check("shipment-jobs", platform.DefaultDLQRetention, "fulfilment")

	topic.DLQ = platform.DLQSpec{Retention: 720 * time.Hour}
	cat.Topics["payments"] = topic
	changes, err := r.Apply(ctx, cat, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a := actions(changes)["topic payments"]; a != ActionUpdate {
		t.Errorf("changing the DLQ retention: action %q (changes %+v)", a, changes)
	}
	check("payments", 720*time.Hour, "checkout")
}
