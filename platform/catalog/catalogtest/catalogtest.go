package catalogtest

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
)

// ApplyGroups applies topic spec and the named groups on it with a default
// Reconciler on js, failing the test if it refuses.
func ApplyGroups(t testing.TB, js jetstream.JetStream, spec platform.TopicSpec, groups ...string) {
	t.Helper()
	cat := platform.Catalog{Topics: map[string]platform.TopicSpec{spec.Name: spec}, Groups: map[string]platform.GroupSpec{}}
	for _, g := range groups {
		cat.Groups[g] = platform.GroupSpec{Name: g, Topic: spec.Name}
	}
	if _, err := catalog.NewReconciler(js, catalog.ReconcilerOptions{}).Apply(natstest.Context(t, 60*time.Second), cat, catalog.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Topic is the default spec of topic name with partitions partitions,
// owned by "checkout".
func Topic(name string, partitions int) platform.TopicSpec {
	spec := platform.DefaultTopicSpec(name)
	spec.Partitions = partitions
	spec.Owner = "checkout"
	return spec
}

// TopicFabric starts a fabric of nodes nodes with topic spec and the named
// groups on it applied, and returns the fabric and a JetStream context on
// it.
func TopicFabric(t testing.TB, nodes int, spec platform.TopicSpec, groups ...string) (*natstest.Fabric, jetstream.JetStream) {
	t.Helper()
	f := natstest.RunFabric(t, nodes)
	js := f.JetStream()
	ApplyGroups(t, js, spec, groups...)
	return f, js
}

// GroupFabric starts a 3-node fabric (natstest.RunFabric with opts) with
// Topic(topic, partitions) and group on it applied, and returns the
// fabric and a JetStream context on it.
func GroupFabric(t testing.TB, topic string, partitions int, group string, opts ...natstest.Option) (*natstest.Fabric, jetstream.JetStream) {
	t.Helper()
	f := natstest.RunFabric(t, 3, opts...)
	js := f.JetStream()
	ApplyGroups(t, js, Topic(topic, partitions), group)
	return f, js
}

// CanaryObjects returns the objects a canary test measures, each with 1
// replica: topic with 4 partitions, optedOut with canaries off, and
// queue.
func CanaryObjects(topic, optedOut, queue string) (platform.TopicSpec, platform.TopicSpec, platform.QueueSpec) {
	off := false
	t := platform.DefaultTopicSpec(topic)
	t.Partitions, t.Replicas = 4, 1
	o := platform.DefaultTopicSpec(optedOut)
	o.Replicas, o.Canary = 1, &off
	q := platform.DefaultQueueSpec(queue)
	q.Replicas = 1
	return t, o, q
}
