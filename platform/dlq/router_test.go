package dlq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/platform/catalog/catalogtest"
	"github.com/msgplatform/platform/platform/dlq"
)

// A client that terminates an event without copying it to the DLQ (a
// plain JetStream consumer, a tool, an old library): the captured
// MSG_TERMINATED advisory gives it a DLQ entry, class terminated, with the
// client's reason; on a topic with the payload, on a work queue (which
// deleted the job) with the loss said in the reason. One entry each.
func TestDLQRouterCapturesMsgTerminated(t *testing.T) {
	t.Parallel()
	_, js := catalogtest.GroupFabric(t, "returns", 1, "refunder", natstest.WithSyncAlways(false))
	ctx := natstest.Context(t, 60*time.Second)
	q := platform.DefaultQueueSpec("label-jobs")
	if _, err := catalog.NewReconciler(js, catalog.ReconcilerOptions{}).ApplyQueue(ctx, q, catalog.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	router := dlq.NewRouter(js, []string{"returns", "label-jobs"}, natstest.Logger(t))
	if err := router.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = router.Close(context.Background()) })

	if _, err := platform.NewPublisher(js, platform.PublisherOptions{}).Publish(ctx, platform.Event{ID: "ret-1", Topic: "returns", Key: "order:R1", Payload: []byte("return R1")}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "label-jobs.R1", []byte("label R1")); err != nil {
		t.Fatal(err)
	}
	term := func(stream, consumer string, opts ...jetstream.FetchOpt) {
		t.Helper()
		c, err := js.Consumer(ctx, stream, consumer)
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.Fetch(1, append([]jetstream.FetchOpt{jetstream.FetchMaxWait(5 * time.Second)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range b.Messages() {
			n++
			if err := m.TermWithReason("operator stopped it: fraud hold"); err != nil {
				t.Fatal(err)
			}
		}
		if n != 1 {
			t.Fatalf("%s/%s: fetched %d, want 1 (%v)", stream, consumer, n, b.Error())
		}
	}
	term("returns", platform.PartitionConsumer("refunder", 0), jetstream.FetchPriorityGroup("refunder"))
	term("label-jobs", platform.QueueConsumer)

	entries := map[string]dlq.Entry{}
	natstest.WaitFor(t, 20*time.Second, func() error {
		for _, obj := range []string{"returns", "label-jobs"} {
			es, err := dlq.Read(ctx, js, obj)
			if err != nil {
				return err
			}
			if len(es) != 1 {
				return fmt.Errorf("%s: %d DLQ entries", obj, len(es))
			}
			entries[obj] = es[0]
		}
		return nil
	})
	for obj, e := range entries {
		if e.Class != dlq.ClassTerminated || !strings.Contains(e.Reason, "fraud hold") || e.Attempts != 1 || e.StreamSeq != 1 || e.Stream != platform.StreamName(obj) {
			t.Errorf("%s entry: %+v", obj, e)
		}
	}
	if e := entries["returns"]; string(e.Payload) != "return R1" || e.Group != "refunder" || e.Consumer != platform.PartitionConsumer("refunder", 0) || e.Subject != "returns.0.order:R1" {
		t.Errorf("topic entry: payload %q group %q consumer %q subject %q", e.Payload, e.Group, e.Consumer, e.Subject)
	}
	// A term on a work queue acknowledges the job, so the stream removes
	// it; the router races that removal. Either it read the job first and
	// kept its payload, or it says the payload is lost; never a copy
	// without the payload that does not say so.
	if e := entries["label-jobs"]; e.Group != "label-jobs" ||
		!(strings.Contains(e.Reason, "payload lost") || string(e.Payload) == "label R1") {
		t.Errorf("queue entry: group %q reason %q payload %q", e.Group, e.Reason, e.Payload)
	}
	time.Sleep(time.Second) // nothing more arrives
	for obj := range entries {
		if es, _ := dlq.Read(ctx, js, obj); len(es) != 1 {
			t.Errorf("%s: %d DLQ entries, want exactly 1", obj, len(es))
		}
	}
}

// The node leading the router's consumer dies: the router's pull request
// dies with it, and the router takes the next advisory from the new
// leader within seconds (its consumer's AckWait is 30 s), one entry each.
func TestDLQRouterKeepsRoutingWhenItsLeaderDies(t *testing.T) {
	f, js := catalogtest.GroupFabric(t, "returns", 1, "refunder")
	ctx := natstest.Context(t, 90*time.Second)
	router := dlq.NewRouter(js, []string{"returns"}, natstest.Logger(t))
	if err := router.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = router.Close(context.Background()) })
	pub := platform.NewPublisher(js, platform.PublisherOptions{})
	c, err := js.Consumer(ctx, "returns", platform.PartitionConsumer("refunder", 0))
	if err != nil {
		t.Fatal(err)
	}
	term := func(id string) { // c keeps the pin its first fetch took
		t.Helper()
		natstest.WaitFor(t, 30*time.Second, func() error {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_, err := pub.Publish(pctx, platform.Event{ID: id, Topic: "returns", Key: "order:R1", Payload: []byte(id)})
			return err
		})
		natstest.WaitFor(t, 30*time.Second, func() error {
			b, err := c.Fetch(1, jetstream.FetchMaxWait(2*time.Second), jetstream.FetchPriorityGroup("refunder"))
			if err != nil {
				return err
			}
			m, ok := <-b.Messages()
			if !ok {
				return fmt.Errorf("nothing fetched (%v)", b.Error())
			}
			if string(m.Data()) != id {
				return fmt.Errorf("fetched %q, want %q", m.Data(), id)
			}
			return m.TermWithReason("operator stopped it")
		})
	}
	routed := func(n int) time.Duration {
		t.Helper()
		began := time.Now()
		natstest.WaitFor(t, 40*time.Second, func() error {
			es, err := dlq.Read(ctx, js, "returns")
			if err != nil || len(es) != n {
				return fmt.Errorf("%d DLQ entries, want %d (%v)", len(es), n, err)
			}
			return nil
		})
		return time.Since(began)
	}
	term("ret-1")
	routed(1)
	victim := -1
	natstest.WaitFor(t, 10*time.Second, func() error {
		for i, n := range f.Nodes() {
			if s := n.Server(); s != nil && s.JetStreamIsConsumerLeader(f.Trust().AdminAccount(), platform.DLQEventsStream("returns"), dlq.RouterConsumer) {
				victim = i
				return nil
			}
		}
		return errors.New("no router consumer leader")
	})
	f.Kill(victim)
	term("ret-2")
	d := routed(2)
	t.Logf("second advisory routed %s after its event was terminated (router consumer's leader killed)", d.Round(time.Millisecond))
	if d > 25*time.Second {
		t.Errorf("routed after %s, want well before the router consumer's 30s AckWait", d)
	}
	time.Sleep(time.Second)
	if es, _ := dlq.Read(ctx, js, "returns"); len(es) != 2 {
		t.Errorf("%d DLQ entries, want exactly 2", len(es))
	}
}
