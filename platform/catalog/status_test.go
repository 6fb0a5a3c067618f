package catalog

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/platform"
)

// 100 events over 10 keys; group "billing" acks everything on some
// partitions and half of another; DescribeTopic must count each partition,
// the group's pending and the age of its oldest unprocessed event.
func TestDescribeTopic(t *testing.T) {
	t.Parallel()
	r, _, js, ctx := onFabric(t, 3)
	orders := platform.DefaultTopicSpec("orders")
	orders.Partitions = 8
	orders.Owner = "checkout"
	cat := platform.Catalog{
		Topics: map[string]platform.TopicSpec{"orders": orders},
		Groups: map[string]platform.GroupSpec{
			"billing": {Name: "billing", Topic: "orders"},
			"audit":   {Name: "audit", Topic: "orders"},
		},
	}
	if _, err := r.Apply(ctx, cat, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	// A stream the platform does not manage is not listed.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "legacy", Subjects: []string{"legacy.>"}}); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	perPartition := make([]int, orders.Partitions)
	for i := range 100 {
		key := fmt.Sprintf("order:HC-%d", i%10)
		if _, err := js.Publish(ctx, platform.TopicSubject("orders", key), []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
		perPartition[platform.PartitionOf(key, orders.Partitions)]++
	}
	published := time.Now()
	time.Sleep(50 * time.Millisecond) // make ages measurable

	// billing processes every partition but the last non-empty one
	// completely, and half of that one.
	var partial int
	for p := orders.Partitions - 1; p >= 0; p-- {
		if perPartition[p] > 1 {
			partial = p
			break
		}
	}
	wantPending := map[int]uint64{}
	for p := range orders.Partitions {
		n := perPartition[p]
		if n == 0 {
			continue
		}
		ack := n
		if p == partial {
			ack = n / 2
		}
		wantPending[p] = uint64(n - ack)
		c, err := js.Consumer(ctx, "orders", platform.PartitionConsumer("billing", p))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range natstest.FetchAll(t, c, ack, jetstream.FetchPriorityGroup("billing")) {
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}

	st, err := r.DescribeTopic(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if st.Spec.Name != "orders" || st.Spec.Partitions != 8 || st.Spec.Owner != "checkout" || st.Spec.Replicas != 3 || st.Spec.Retention.MaxAge != 72*time.Hour {
		t.Errorf("spec read back: %+v", st.Spec)
	}
	if st.Stream.Messages != 100 || st.Stream.Cluster.Leader == "" || len(st.Stream.Cluster.Replicas) != 3 {
		t.Errorf("stream: %+v", st.Stream)
	}
	var sum uint64
	for p, ps := range st.Partitions {
		if ps.Messages != uint64(perPartition[p]) || ps.Subject != platform.PartitionSubject("orders", p) {
			t.Errorf("partition %d: %+v, want %d messages", p, ps, perPartition[p])
		}
		sum += ps.Messages
	}
	if sum != 100 {
		t.Errorf("partitions sum to %d, want 100", sum)
	}
	if len(st.Groups) != 2 || st.Groups[0].Name != "audit" || st.Groups[1].Name != "billing" {
		t.Fatalf("groups: %+v", st.Groups)
	}
	audit, billing := st.Groups[0], st.Groups[1]
	if audit.Pending != 100 || len(audit.Partitions) != 8 || len(audit.MissingPartitions) != 0 {
		t.Errorf("audit: pending %d, %d partitions", audit.Pending, len(audit.Partitions))
	}
	// Every event was published between start and published, so an
	// oldest unprocessed event is that old, as of st.At.
	lo, hi := st.At.Sub(published), st.At.Sub(start)
	if audit.OldestAge < lo || audit.OldestAge > hi {
		t.Errorf("audit oldest age %s, want within [%s, %s]", audit.OldestAge, lo, hi)
	}
	var totalWant uint64
	for _, n := range wantPending {
		totalWant += n
	}
	if billing.Pending != totalWant {
		t.Errorf("billing pending %d, want %d", billing.Pending, totalWant)
	}
	var oldest time.Duration
	for _, gp := range billing.Partitions {
		if gp.Pending != wantPending[gp.Partition] {
			t.Errorf("billing partition %d pending %d, want %d", gp.Partition, gp.Pending, wantPending[gp.Partition])
		}
		switch {
		case gp.Pending == 0 && gp.OldestAge != 0:
			t.Errorf("billing partition %d: nothing pending but oldest age %s", gp.Partition, gp.OldestAge)
		case gp.Pending > 0 && (gp.OldestAge < lo || gp.OldestAge > hi):
			t.Errorf("billing partition %d: oldest age %s, want within [%s, %s]", gp.Partition, gp.OldestAge, lo, hi)
		}
		oldest = max(oldest, gp.OldestAge)
	}
	if billing.OldestAge != oldest || oldest == 0 {
		t.Errorf("billing oldest age %s, want the partitions' max %s > 0", billing.OldestAge, oldest)
	}
	if b, err := json.Marshal(st); err != nil || !strings.Contains(string(b), `"oldest_age":`) || !strings.Contains(string(b), `"partitions":[{"partition":0`) {
		t.Errorf("json: %v %s", err, b)
	}

	// Counts stay exact with deleted messages (interior and first).
	stream, err := js.Stream(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []int{0, 1} {
		m, err := stream.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(platform.PartitionSubject("orders", p)))
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.DeleteMsg(ctx, m.Sequence); err != nil {
			t.Fatal(err)
		}
		perPartition[p]--
	}
	natstest.WaitFor(t, 5*time.Second, func() error {
		st, err := r.DescribeTopic(ctx, "orders")
		if err != nil {
			return err
		}
		for p, ps := range st.Partitions {
			if ps.Messages != uint64(perPartition[p]) {
				return fmt.Errorf("after deletes, partition %d has %d messages, want %d", p, ps.Messages, perPartition[p])
			}
		}
		return nil
	})

	topics, err := r.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(topics) != 1 || topics[0].Spec.Name != "orders" || topics[0].Stream.Messages != 98 || len(topics[0].Stream.Cluster.Replicas) != 3 {
		t.Errorf("ListTopics: %+v", topics)
	}
	if _, err := r.DescribeTopic(ctx, "legacy"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("describe foreign stream: %v", err)
	}
}

// A queue's lease and attempts land on its consumer; describe shows
// pending, in-flight and oldest job age.
func TestQueueConsumerAndDescribe(t *testing.T) {
	t.Parallel()
	r, rec, js, ctx := onFabric(t, 3)
	q := platform.QueueSpec{Name: "shipment-jobs", Lease: 10 * time.Second, MaxAttempts: 3}
	ch, err := r.ApplyQueue(ctx, q, ApplyOptions{})
	if err != nil || ch.Action != ActionCreate {
		t.Fatalf("%v %v", ch, err)
	}
	if cc := natstest.ConsumerConfig(t, js, "shipment-jobs", platform.QueueConsumer); cc.AckWait != 10*time.Second || cc.MaxDeliver != 3 {
		t.Errorf("consumer: ack wait %s, max deliver %d", cc.AckWait, cc.MaxDeliver)
	}
	if sc := natstest.StreamConfig(t, js, "shipment-jobs"); sc.Replicas != 3 {
		t.Errorf("replicas 0 should default to 3, got %d", sc.Replicas)
	}

	q.Lease, q.MaxAttempts = time.Minute, 5
	rec.reset()
	ch, err = r.ApplyQueue(ctx, q, ApplyOptions{})
	if err != nil || ch.Action != ActionUpdate {
		t.Fatalf("%v %v", ch, err)
	}
	for _, want := range []string{"lease: 10s -> 1m0s", "max_attempts: 3 -> 5", "consumer workers: ack_wait: 10s -> 1m0s", "consumer workers: max_deliver: 3 -> 5"} {
		if !strings.Contains(strings.Join(ch.Details, "\n"), want) {
			t.Errorf("details %q lack %q", ch.Details, want)
		}
	}
	if cc := natstest.ConsumerConfig(t, js, "shipment-jobs", platform.QueueConsumer); cc.AckWait != time.Minute || cc.MaxDeliver != 5 {
		t.Errorf("consumer after update: ack wait %s, max deliver %d", cc.AckWait, cc.MaxDeliver)
	}

	for i := range 5 {
		if _, err := js.Publish(ctx, fmt.Sprintf("shipment-jobs.ship.%d", i), []byte("job")); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond)
	c, err := js.Consumer(ctx, "shipment-jobs", platform.QueueConsumer)
	if err != nil {
		t.Fatal(err)
	}
	msgs := natstest.FetchAll(t, c, 3)
	if err := msgs[0].DoubleAck(ctx); err != nil { // one done, two leased
		t.Fatal(err)
	}
	// A work queue deletes an acknowledged job through its Raft log:
	// wait until that is applied.
	var st QueueStatus
	natstest.WaitFor(t, 5*time.Second, func() error {
		st, err = r.DescribeQueue(ctx, "shipment-jobs")
		if err == nil && st.Stream.Messages != 4 {
			err = fmt.Errorf("%d jobs in the stream", st.Stream.Messages)
		}
		return err
	})
	if st.Pending != 2 || st.InFlight != 2 || st.Stream.Messages != 4 || st.Spec.Lease != time.Minute || st.Spec.MaxAttempts != 5 {
		t.Errorf("describe: %+v", st)
	}
	if st.OldestAge < 20*time.Millisecond || st.OldestAge > 10*time.Second {
		t.Errorf("oldest age %s", st.OldestAge)
	}
	queues, err := r.ListQueues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(queues) != 1 || queues[0].Spec.Name != "shipment-jobs" || queues[0].Stream.Messages != 4 {
		t.Errorf("ListQueues: %+v", queues)
	}
	if _, err := r.DescribeQueue(ctx, "nope"); err == nil {
		t.Error("describe missing queue: no error")
	}
}
