package catalog

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/platform"
)

func TestDrainTimeGuideFigure(t *testing.T) {
	// The guide: 36 M events at 50,000/s against 20,000/s arriving ≈ 20 min.
	d, ok := DrainTime(36_000_000, 50_000, 20_000)
	if !ok || d != 20*time.Minute {
		t.Fatalf("DrainTime(36M, 50k, 20k) = %s, %v; want 20m0s, true", d, ok)
	}
	if _, ok := DrainTime(1000, 20_000, 20_000); ok {
		t.Fatal("consume == arrival must never drain")
	}
	if _, ok := DrainTime(1000, 10, 20); ok {
		t.Fatal("consume < arrival must never drain")
	}
	if d, ok := DrainTime(0, 0, 0); !ok || d != 0 {
		t.Fatalf("empty backlog: %s %v", d, ok)
	}
}

func TestGroupResetRequestValidate(t *testing.T) {
	now := time.Now().Add(-time.Hour)
	for _, tc := range []struct {
		name string
		req  GroupResetRequest
		ok   bool
	}{
		{"start", GroupResetRequest{Group: "g", ToStart: true}, true},
		{"time", GroupResetRequest{Group: "g", ToTime: &now}, true},
		{"none", GroupResetRequest{Group: "g"}, false},
		{"two", GroupResetRequest{Group: "g", ToStart: true, ToEnd: true}, false},
		{"bad name", GroupResetRequest{Group: "G!", ToEnd: true}, false},
	} {
		err := tc.req.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, platform.ErrInvalidSpec) {
			t.Errorf("%s: %v is not ErrInvalidSpec", tc.name, err)
		}
	}
}

// resetFixture is a 3-partition topic with groups a and b, 30 events
// published in two halves around time mid, and both groups moved to the
// end (everything processed).
type resetFixture struct {
	rec   *Reconciler
	js    jetstream.JetStream
	mid   time.Time
	after map[int][]uint64 // per partition, seqs stored at or after mid
	all   map[int][]uint64
}

func newResetFixture(t *testing.T, review string) resetFixture {
	t.Helper()
	rec, _, js, ctx := onFabric(t, 1)
	topic := platform.DefaultTopicSpec("payments")
	topic.Partitions = 3
	topic.Replicas = 1
	topic.Review = review
	cat := platform.Catalog{
		Topics: map[string]platform.TopicSpec{"payments": topic},
		Groups: map[string]platform.GroupSpec{"a": {Name: "a", Topic: "payments"}, "b": {Name: "b", Topic: "payments"}},
	}
	if _, err := rec.Apply(ctx, cat, ApplyOptions{AllowReducedReplicas: true}); err != nil {
		t.Fatal(err)
	}
	fx := resetFixture{rec: rec, js: js, after: map[int][]uint64{}, all: map[int][]uint64{}}
	pub := platform.NewPublisher(js, platform.PublisherOptions{})
	publish := func(from, to int, late bool) {
		for i := from; i < to; i++ {
			key := fmt.Sprintf("k%d", i)
			ack, err := pub.Publish(ctx, platform.Event{ID: fmt.Sprint(i), Topic: "payments", Key: key})
			if err != nil {
				t.Fatal(err)
			}
			p := platform.PartitionOf(key, 3)
			fx.all[p] = append(fx.all[p], ack.Sequence)
			if late {
				fx.after[p] = append(fx.after[p], ack.Sequence)
			}
		}
	}
	publish(0, 15, false)
	time.Sleep(50 * time.Millisecond)
	fx.mid = time.Now()
	time.Sleep(50 * time.Millisecond)
	publish(15, 30, true)
	for _, g := range []string{"a", "b"} {
		if review == "" {
			if _, err := rec.ResetGroup(ctx, GroupResetRequest{Group: g, ToEnd: true}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		for p := range 3 {
			if _, err := js.ResetConsumerToSequence(ctx, "payments", platform.PartitionConsumer(g, p), 31); err != nil {
				t.Fatal(err)
			}
		}
	}
	return fx
}

// fetchGroup pulls every event the consumer delivers (via its priority
// group) and acks it, returning their stream sequences.
func fetchGroup(t *testing.T, js jetstream.JetStream, stream, consumer, group string) []uint64 {
	t.Helper()
	ctx := natstest.Context(t, 10*time.Second)
	// A fresh handle is a new client: release the pin an earlier one holds.
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.UnpinConsumer(ctx, consumer, group); err != nil {
		t.Fatal(err)
	}
	c, err := js.Consumer(ctx, stream, consumer)
	if err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for {
		batch, err := c.Fetch(100, jetstream.FetchMaxWait(300*time.Millisecond), jetstream.FetchPriorityGroup(group))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			md, _ := m.Metadata()
			seqs = append(seqs, md.Sequence.Stream)
			_ = m.Ack()
			n++
		}
		if n == 0 {
			return seqs
		}
	}
}

func TestGroupResetToTimeReprocessesExactlyEventsAfterT(t *testing.T) {
	fx := newResetFixture(t, "")
	ctx := natstest.Context(t, 60*time.Second)

	// Dry run: per-partition positions and counts, nothing moved.
	mid := fx.mid
	plan, err := fx.rec.ResetGroup(ctx, GroupResetRequest{Group: "a", ToTime: &mid, DryRun: true, ConsumeRate: 50_000, ArrivalRate: 20_000})
	if err != nil {
		t.Fatal(err)
	}
	if plan.Topic != "payments" || len(plan.Partitions) != 3 || plan.ToProcess != 15 || plan.Pending != 0 || !plan.Drains {
		t.Fatalf("dry run plan: %+v", plan)
	}
	for _, pos := range plan.Partitions {
		want := fx.after[pos.Partition]
		if pos.ToProcess != uint64(len(want)) || (len(want) > 0 && pos.NewSeq != want[0]) {
			t.Errorf("partition %d: new seq %d to process %d, want first %v", pos.Partition, pos.NewSeq, pos.ToProcess, want)
		}
	}
	for p := range 3 {
		ci, err := fx.js.Consumer(ctx, "payments", platform.PartitionConsumer("a", p))
		if err != nil {
			t.Fatal(err)
		}
		if ci.CachedInfo().NumPending != 0 {
			t.Fatalf("dry run moved partition %d", p)
		}
	}

	// Apply: group a gets exactly the events after T on every partition.
	if _, err := fx.rec.ResetGroup(ctx, GroupResetRequest{Group: "a", ToTime: &mid}); err != nil {
		t.Fatal(err)
	}
	for p := range 3 {
		got := fetchGroup(t, fx.js, "payments", platform.PartitionConsumer("a", p), "a")
		if !slices.Equal(got, fx.after[p]) {
			t.Errorf("group a partition %d reprocessed %v, want %v", p, got, fx.after[p])
		}
		// Group b untouched: nothing pending, nothing delivered.
		if got := fetchGroup(t, fx.js, "payments", platform.PartitionConsumer("b", p), "b"); len(got) != 0 {
			t.Errorf("group b partition %d got %v after resetting a", p, got)
		}
	}

	// To start: everything again.
	if _, err := fx.rec.ResetGroup(ctx, GroupResetRequest{Group: "a", ToStart: true}); err != nil {
		t.Fatal(err)
	}
	for p := range 3 {
		if got := fetchGroup(t, fx.js, "payments", platform.PartitionConsumer("a", p), "a"); !slices.Equal(got, fx.all[p]) {
			t.Errorf("to start: partition %d got %v, want %v", p, got, fx.all[p])
		}
	}
}

func TestGroupResetRefusedOnReviewedTopic(t *testing.T) {
	fx := newResetFixture(t, platform.ReviewRequired)
	ctx := natstest.Context(t, 30*time.Second)
	_, err := fx.rec.ResetGroup(ctx, GroupResetRequest{Group: "a", ToStart: true})
	if !errors.Is(err, ErrApprovalRequired) {
		t.Fatalf("reset without approval: %v, want ErrApprovalRequired", err)
	}
	_, err = fx.rec.ResetGroup(ctx, GroupResetRequest{Group: "a", ToStart: true, ApprovalID: "req-1"})
	if !errors.Is(err, ErrApprovalRequired) {
		t.Fatalf("reset with an unverifiable approval: %v, want ErrApprovalRequired", err)
	}
	t.Log(err)
	plan, err := fx.rec.ResetGroup(ctx, GroupResetRequest{Group: "a", ToStart: true, DryRun: true})
	if err != nil || !plan.ReviewRequired || plan.ToProcess != 30 {
		t.Fatalf("dry run on a reviewed topic: %+v, %v", plan, err)
	}
	if got := fetchGroup(t, fx.js, "payments", platform.PartitionConsumer("a", 0), "a"); len(got) != 0 {
		t.Fatalf("refused reset moved the group: %v", got)
	}
	if _, err := fx.rec.ResetGroup(ctx, GroupResetRequest{Group: "nope", ToEnd: true}); !errors.Is(err, platform.ErrNotFound) {
		t.Fatalf("unknown group: %v", err)
	}
}
