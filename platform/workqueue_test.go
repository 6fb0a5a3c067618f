package platform

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
)

// A worker that crashes holding a job: the job comes back to another
// worker after the lease. A job longer than the lease keeps it by
// heartbeat. A permanent failure is copied to the DLQ, then deleted.
func TestWorkersLeasesAndDeadLetters(t *testing.T) {
	t.Parallel()
	f := natstest.RunFabric(t, 3)
	js := f.JetStream()
	ctx := testCtx(t, 60*time.Second)
	q := DefaultQueueSpec("shipment-jobs")
	q.Lease, q.MaxAttempts = time.Second, 3
	if _, err := NewReconciler(js, ReconcilerOptions{}).ApplyQueue(ctx, q, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	entered := make(chan struct{}, 1)
	crashConn := f.Conn()
	cjs, _ := jetstream.New(crashConn)
	w1, err := NewWorkers(cjs, WorkersConfig{Queue: "shipment-jobs", Concurrency: 1, NoDLQRouter: true}, func(ctx context.Context, m *Message) error {
		entered <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "shipment-jobs.crash", []byte("c")); err != nil {
		t.Fatal(err)
	}
	<-entered
	crashedAt := time.Now()
	w1.crash()
	crashConn.Close()

	var got atomic.Value
	var longDeliveries atomic.Int32
	w2, err := NewWorkers(js, WorkersConfig{Queue: "shipment-jobs", Concurrency: 4}, func(ctx context.Context, m *Message) error {
		switch m.Subject {
		case "shipment-jobs.crash":
			got.Store(time.Since(crashedAt))
		case "shipment-jobs.long":
			longDeliveries.Add(1)
			time.Sleep(2500 * time.Millisecond) // 2.5 leases
		case "shipment-jobs.bad":
			return Permanent(errors.New("no such address"))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w2.Close(context.Background()) })
	for _, s := range []string{"long", "bad"} {
		if _, err := js.Publish(ctx, "shipment-jobs."+s, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	natstest.WaitFor(t, 15*time.Second, func() error {
		if got.Load() == nil {
			return errors.New("crashed job not back yet")
		}
		es, err := ReadDLQ(ctx, js, "shipment-jobs")
		if err != nil || len(es) != 1 {
			return fmt.Errorf("dlq: %d entries, %v", len(es), err)
		}
		s, err := js.Stream(ctx, "shipment-jobs")
		if err != nil {
			return err
		}
		if info, err := s.Info(ctx); err != nil || info.State.Msgs != 0 {
			return fmt.Errorf("queue still holds jobs: %v", err)
		}
		return nil
	})
	if d := got.Load().(time.Duration); d > 5*time.Second {
		t.Errorf("crashed job came back after %s, want about one lease", d)
	}
	if n := longDeliveries.Load(); n != 1 {
		t.Errorf("long job delivered %d times, want 1 (its lease renewed)", n)
	}
	es, _ := ReadDLQ(ctx, js, "shipment-jobs")
	if e := es[0]; e.Class != ClassPermanent || e.Attempts != 1 || string(e.Payload) != "bad" || e.Group != "shipment-jobs" {
		t.Errorf("entry %+v", e)
	}
}

// A worker loses its connection mid-job (no crash of the process, no
// Close): a live peer sees its session lapse and gives the job back, so
// it is redelivered within seconds, well before the queue's 60 s lease.
func TestWorkersDroppedConnectionReturnsJobEarly(t *testing.T) {
	t.Parallel()
	f := natstest.RunFabric(t, 1)
	js := f.JetStream()
	ctx := testCtx(t, 60*time.Second)
	q := DefaultQueueSpec("shipment-jobs") // lease 60s
	q.Replicas = 1
	if _, err := NewReconciler(js, ReconcilerOptions{}).ApplyQueue(ctx, q, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	fast := func(id string) WorkersConfig {
		return WorkersConfig{Queue: "shipment-jobs", Concurrency: 1, ID: id, NoDLQRouter: true,
			SessionHeartbeat: 200 * time.Millisecond, SessionTTL: 2 * time.Second, Metrics: NewConsumerMetrics()}
	}
	entered := make(chan struct{}, 1)
	lostConn := f.Conn()
	ljs, _ := jetstream.New(lostConn)
	w1, err := NewWorkers(ljs, fast("w1"), func(ctx context.Context, m *Message) error {
		entered <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w1.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = w1.Close(cctx) // cancels the handler stuck on the lost connection
	})
	if _, err := js.Publish(ctx, "shipment-jobs.ship.1", []byte("ship order 1")); err != nil {
		t.Fatal(err)
	}
	<-entered
	var handled atomic.Int32
	var backAfter, droppedAt atomic.Int64
	cfg2 := fast("w2")
	w2, err := NewWorkers(js, cfg2, func(ctx context.Context, m *Message) error {
		if m.Subject == "shipment-jobs.ship.1" && handled.Add(1) == 1 {
			backAfter.Store(time.Now().UnixNano() - droppedAt.Load())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w2.Close(context.Background()) })
	time.Sleep(500 * time.Millisecond) // w2's session is up
	droppedAt.Store(time.Now().UnixNano())
	lostConn.Close()

	natstest.WaitFor(t, 30*time.Second, func() error {
		if handled.Load() == 0 {
			return errors.New("job not redelivered yet")
		}
		return nil
	})
	if d := time.Duration(backAfter.Load()); d > 15*time.Second {
		t.Errorf("job came back %s after the connection dropped, want well before the 60s lease", d)
	}
	if n := counterSum(t, cfg2.Metrics, "platform_queue_jobs_reclaimed_total"); n != 1 {
		t.Errorf("jobs reclaimed: %v, want 1", n)
	}
	s, err := js.Stream(ctx, "shipment-jobs")
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if info, err := s.Info(ctx); err != nil || info.State.Msgs != 0 {
			return fmt.Errorf("queue still holds the job (%v)", err)
		}
		return nil
	})
	t.Logf("job back %s after the connection dropped (lease 60s)", time.Duration(backAfter.Load()).Round(time.Millisecond))
}
