package consumer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/platform/dlq"
)

// queueFabric runs a fabric of nodes nodes and applies q to it, its
// replicas capped at nodes: the fabric, an admin JetStream context on it
// and a ctx that ends with the test or after timeout.
func queueFabric(t *testing.T, nodes int, q platform.QueueSpec, timeout time.Duration) (*natstest.Fabric, jetstream.JetStream, context.Context) {
	t.Helper()
	q.Replicas = min(q.Replicas, nodes)
	f := natstest.RunFabric(t, nodes)
	js := f.JetStream()
	ctx := natstest.Context(t, timeout)
	if _, err := catalog.NewReconciler(js, catalog.ReconcilerOptions{}).ApplyQueue(ctx, q, catalog.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	return f, js, ctx
}

// queueDrained waits until queue's stream holds no job (each acked or
// dead-lettered).
func queueDrained(t *testing.T, ctx context.Context, js jetstream.JetStream, queue string, within time.Duration) {
	t.Helper()
	natstest.WaitFor(t, within, func() error {
		s, err := js.Stream(ctx, platform.StreamName(queue))
		if err != nil {
			return err
		}
		if info, err := s.Info(ctx); err != nil || info.State.Msgs != 0 {
			return fmt.Errorf("queue %s still holds jobs (%v)", queue, err)
		}
		return nil
	})
}

// startWorkers starts workers of cfg.Queue on js, closed when the test
// ends.
func startWorkers(t *testing.T, ctx context.Context, js jetstream.JetStream, cfg WorkersConfig, h Handler) *Workers {
	t.Helper()
	w, err := NewWorkers(js, cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // handlers still running then are cancelled after 5s
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Close(cctx)
	})
	return w
}

// heldUntilCancelled is a handler that signals entered, then holds its
// job until its ctx ends (a crash or Close cancels it).
func heldUntilCancelled(entered chan<- struct{}) Handler {
	return func(ctx context.Context, m *Message) error {
		entered <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}
}

// A worker that crashes holding a job: the job comes back to another
// worker after the lease. A job longer than the lease keeps it by
// heartbeat. A permanent failure is copied to the DLQ, then deleted.
func TestWorkersLeasesAndDeadLetters(t *testing.T) {
	t.Parallel()
	q := platform.DefaultQueueSpec("shipment-jobs")
	q.Lease, q.MaxAttempts = time.Second, 3
	f, js, ctx := queueFabric(t, 3, q, 60*time.Second)
	entered := make(chan struct{}, 1)
	crashConn := f.Conn()
	cjs, _ := jetstream.New(crashConn)
	w1 := startWorkers(t, ctx, cjs, WorkersConfig{Queue: "shipment-jobs", Concurrency: 1, NoDLQRouter: true}, heldUntilCancelled(entered))
	publishJob(t, ctx, js, "shipment-jobs.crash", []byte("c"))
	<-entered
	crashedAt := time.Now()
	w1.crash()
	crashConn.Close()

	var got atomic.Value
	var longDeliveries atomic.Int32
	startWorkers(t, ctx, js, WorkersConfig{Queue: "shipment-jobs", Concurrency: 4}, func(ctx context.Context, m *Message) error {
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
	for _, s := range []string{"long", "bad"} {
		publishJob(t, ctx, js, "shipment-jobs."+s, []byte(s))
	}
	natstest.WaitFor(t, 15*time.Second, func() error {
		if got.Load() == nil {
			return errors.New("crashed job not back yet")
		}
		es, err := dlq.Read(ctx, js, "shipment-jobs")
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
	es, _ := dlq.Read(ctx, js, "shipment-jobs")
	if e := es[0]; e.Class != dlq.ClassPermanent || e.Attempts != 1 || string(e.Payload) != "bad" || e.Group != "shipment-jobs" {
		t.Errorf("entry %+v", e)
	}
}

// A worker loses its connection mid-job (no crash of the process, no
// Close): a live peer sees its session lapse and gives the job back, so
// it is redelivered within seconds, well before the queue's 60 s lease.
func TestWorkersDroppedConnectionReturnsJobEarly(t *testing.T) {
	t.Parallel()
	q := platform.DefaultQueueSpec("shipment-jobs") // lease 60s
	f, js, ctx := queueFabric(t, 1, q, 60*time.Second)
	fast := func(id string) WorkersConfig {
		return WorkersConfig{Queue: "shipment-jobs", Concurrency: 1, ID: id, NoDLQRouter: true,
			SessionHeartbeat: 200 * time.Millisecond, SessionTTL: 2 * time.Second, Metrics: NewMetrics()}
	}
	entered := make(chan struct{}, 1)
	lostConn := f.Conn()
	ljs, _ := jetstream.New(lostConn)
	startWorkers(t, ctx, ljs, fast("w1"), heldUntilCancelled(entered)) // Close cancels the handler stuck on the lost connection
	publishJob(t, ctx, js, "shipment-jobs.ship.1", []byte("ship order 1"))
	<-entered
	var handled atomic.Int32
	var backAfter, droppedAt atomic.Int64
	cfg2 := fast("w2")
	startWorkers(t, ctx, js, cfg2, func(ctx context.Context, m *Message) error {
		if m.Subject == "shipment-jobs.ship.1" && handled.Add(1) == 1 {
			backAfter.Store(time.Now().UnixNano() - droppedAt.Load())
		}
		return nil
	})
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
	queueDrained(t, ctx, js, "shipment-jobs", 10*time.Second)
	t.Logf("job back %s after the connection dropped (lease 60s)", time.Duration(backAfter.Load()).Round(time.Millisecond))
}

// Pull requests reach the server late (what the client sends is held
// 1.8 s): a job served to such a request still reaches the workers at
// once. With a fetch per claim, nats.go gives up on the request's inbox
// a second after its 0.5 s expiry, before the server even has it, so
// every job went to an inbox nobody read and came back only after the
// queue's 60 s lease.
func TestWorkersTakeAJobServedLate(t *testing.T) {
	t.Parallel()
	q := platform.DefaultQueueSpec("shipment-jobs") // lease 60s
	f, js, ctx := queueFabric(t, 1, q, 90*time.Second)
	link := newSlowLink(t, f.Node(0).ClientURL())
	nc, err := embeddednats.ConnectAdmin(f.Trust(), link.url(), nats.NoReconnect())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	wjs, _ := jetstream.New(nc)
	handled := make(chan time.Time, 8)
	startWorkers(t, ctx, wjs, WorkersConfig{Queue: "shipment-jobs", Concurrency: 1, NoDLQRouter: true},
		func(ctx context.Context, m *Message) error {
			handled <- time.Now()
			return nil
		})
	link.delay.Store(int64(1800 * time.Millisecond))
	time.Sleep(4 * time.Second) // only late requests reach the server from here on
	for i := range 3 {
		sent := time.Now()
		publishJob(t, ctx, js, fmt.Sprintf("shipment-jobs.ship.%d", i), []byte("ship"))
		select {
		case at := <-handled:
			if d := at.Sub(sent); d > 10*time.Second {
				t.Errorf("job %d handled %s after it was queued, want within seconds (lease 60s)", i, d)
			}
			t.Logf("job %d handled %s after it was queued", i, at.Sub(sent).Round(time.Millisecond))
		case <-time.After(20 * time.Second):
			t.Fatalf("job %d not handled within 20s (lease 60s): it went to a pull request the workers no longer read", i)
		}
	}
	queueDrained(t, ctx, js, "shipment-jobs", 15*time.Second) // the acks are late too
	select {
	case <-handled:
		t.Error("a job was handled twice")
	default:
	}
}

// The node leading the queue's consumer dies, then the node the workers
// are connected to: the workers' pull requests die with them, and the
// workers keep claiming jobs within seconds (their lease is 60 s), each
// job handled once.
func TestWorkersKeepClaimingWhenNodesDie(t *testing.T) {
	q := platform.DefaultQueueSpec("shipment-jobs") // lease 60s, R3
	f, js, ctx := queueFabric(t, 3, q, 120*time.Second)
	leader := func() int {
		var i int
		natstest.WaitFor(t, 15*time.Second, func() error {
			for n, node := range f.Nodes() {
				if s := node.Server(); s != nil && s.JetStreamIsConsumerLeader(f.Trust().AdminAccount(), "shipment-jobs", platform.QueueConsumer) {
					i = n
					return nil
				}
			}
			return errors.New("no consumer leader")
		})
		return i
	}
	victim := leader()
	nc := f.Conn(nats.DontRandomize())
	natstest.WaitFor(t, 5*time.Second, func() error { // the workers' node is not the leader's
		if nc.ConnectedServerName() == f.Node(victim).Name() {
			nc.ForceReconnect()
			return errors.New("connected to the consumer leader")
		}
		return nil
	})
	wjs, _ := jetstream.New(nc)
	var mu sync.Mutex
	count := map[string]int{}
	startWorkers(t, ctx, wjs, WorkersConfig{Queue: "shipment-jobs", Concurrency: 2, NoDLQRouter: true},
		func(ctx context.Context, m *Message) error {
			mu.Lock()
			count[string(m.Data)]++
			mu.Unlock()
			return nil
		})
	next := 0
	round := func(what string) {
		t.Helper()
		first := next
		for range 10 {
			id := fmt.Sprintf("job-%d", next)
			next++
			natstest.WaitFor(t, 30*time.Second, func() error { // a new stream leader may still be elected
				pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				defer cancel()
				_, err := js.Publish(pctx, "shipment-jobs.ship", []byte(id), jetstream.WithMsgID(id))
				return err
			})
		}
		began := time.Now() // after the queue's new leader took them
		natstest.WaitFor(t, 30*time.Second, func() error {
			mu.Lock()
			defer mu.Unlock()
			for i := first; i < next; i++ {
				if id := fmt.Sprintf("job-%d", i); count[id] == 0 {
					return fmt.Errorf("%s not handled", id)
				}
			}
			return nil
		})
		t.Logf("%s: 10 jobs handled %s after the last was queued", what, time.Since(began).Round(time.Millisecond))
		if d := time.Since(began); d > 20*time.Second {
			t.Errorf("%s: jobs handled after %s, want well before the 60s lease", what, d)
		}
	}
	round("all nodes up")
	f.Kill(victim)
	round("consumer leader dead")
	f.Restart(victim)
	f.WaitHealthy(victim)
	own := -1
	for i, n := range f.Nodes() {
		if n.Name() == nc.ConnectedServerName() {
			own = i
		}
	}
	f.Kill(own)
	round("workers' node dead")
	mu.Lock()
	defer mu.Unlock()
	for id, n := range count {
		if n != 1 {
			t.Errorf("%s handled %d times, want once", id, n)
		}
	}
	if len(count) != next {
		t.Errorf("%d jobs handled, want %d", len(count), next)
	}
}

// The queue's consumer is deleted and created again while workers run
// (an operator's repair, a restore): the workers' pull subscription ends
// with the consumer and they start another, so the next job is handled.
func TestWorkersSurviveTheirConsumerRecreated(t *testing.T) {
	t.Parallel()
	q := platform.DefaultQueueSpec("shipment-jobs")
	_, js, ctx := queueFabric(t, 1, q, 60*time.Second)
	handled := make(chan string, 10)
	startWorkers(t, ctx, js, WorkersConfig{Queue: "shipment-jobs", Concurrency: 2, NoDLQRouter: true, Logger: natstest.Logger(t)}, func(ctx context.Context, m *Message) error {
		handled <- string(m.Data)
		return nil
	})
	publishJob(t, ctx, js, "shipment-jobs.a", []byte("a"))
	if s := <-handled; s != "a" {
		t.Fatalf("handled %q, want a", s)
	}
	cc := natstest.ConsumerConfig(t, js, "shipment-jobs", platform.QueueConsumer)
	if err := js.DeleteConsumer(ctx, "shipment-jobs", platform.QueueConsumer); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if _, err := js.CreateConsumer(ctx, "shipment-jobs", cc); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	publishJob(t, ctx, js, "shipment-jobs.b", []byte("b"))
	select {
	case s := <-handled:
		if s != "b" {
			t.Errorf("handled %q, want b", s)
		}
		t.Logf("%s handled %s after it was queued", s, time.Since(began).Round(time.Millisecond))
	case <-time.After(20 * time.Second):
		t.Fatal("not handled after the consumer was recreated")
	}
}

// A job that reaches a lane holding no free slot for it (here the test
// sends the lane's inbox a pull request of its own; in production a
// request the lane presumed gone, silent for two heartbeats, that was
// not) waits for a slot with its lease renewed: it is handled once, at
// its first delivery, though it waits three times its 3 s lease, while
// other workers wait for jobs. Left
// unseen in a client buffer, as nats.go's Consume left a job delivered
// to the request it sends after a reconnect, its lease lapsed and it was
// handled twice.
func TestWorkersHoldJobsBeyondTheirSlots(t *testing.T) {
	t.Parallel()
	q := platform.DefaultQueueSpec("shipment-jobs")
	q.Lease = 3 * time.Second
	f, js, ctx := queueFabric(t, 1, q, 90*time.Second)
	wnc := f.NodeConn(0)
	wjs, _ := jetstream.New(wnc)
	var mu sync.Mutex
	attempts := map[string][]int{} // job: the attempt of each handling
	entered := make(chan struct{}, 4)
	handler := func(ctx context.Context, m *Message) error {
		mu.Lock()
		attempts[string(m.Data)] = append(attempts[string(m.Data)], m.Attempt)
		mu.Unlock()
		entered <- struct{}{}
		if string(m.Data) == "job-0" { // three leases: job-1 waits behind it
			select {
			case <-time.After(3 * q.Lease):
			case <-ctx.Done():
			}
		}
		return nil
	}
	cfg := WorkersConfig{Queue: "shipment-jobs", Concurrency: 1, NoDLQRouter: true, MaxLease: time.Minute, Metrics: NewMetrics()}
	startWorkers(t, ctx, wjs, cfg, handler)
	publishJob(t, ctx, js, "shipment-jobs.ship", []byte("job-0"))
	<-entered // the lane's one slot is taken

	cid, err := wnc.GetClientID()
	if err != nil {
		t.Fatal(err)
	}
	var inbox string
	natstest.WaitFor(t, 5*time.Second, func() error {
		cz, err := f.Node(0).Server().Connz(&server.ConnzOptions{CID: cid, Subscriptions: true})
		if err != nil || len(cz.Conns) != 1 {
			return fmt.Errorf("workers' connection not listed (%v)", err)
		}
		for _, s := range cz.Conns[0].Subs {
			if strings.HasSuffix(s, pullInboxSuffix) {
				inbox = s
				return nil
			}
		}
		return fmt.Errorf("no lane inbox among %v", cz.Conns[0].Subs)
	})
	if err := js.Conn().PublishRequest(platform.APIPrefix(js)+"CONSUMER.MSG.NEXT."+platform.StreamName("shipment-jobs")+"."+platform.QueueConsumer, inbox,
		[]byte(`{"batch":1,"expires":30000000000}`)); err != nil {
		t.Fatal(err)
	}
	publishJob(t, ctx, js, "shipment-jobs.ship", []byte("job-1"))
	natstest.WaitFor(t, 5*time.Second, func() error { // job-1 held by the lane
		if n := counterSum(t, cfg.Metrics, "platform_queue_jobs_held_total"); n != 1 {
			return fmt.Errorf("platform_queue_jobs_held_total = %v, want 1", n)
		}
		return nil
	})
	// Idle workers beside them would take job-1 if its lease lapsed.
	other := cfg
	other.Metrics = nil
	startWorkers(t, ctx, js, other, handler)
	waitLen(t, 30*time.Second, &mu, func() int { return len(attempts) }, 2, "jobs handled")
	queueDrained(t, ctx, js, "shipment-jobs", 10*time.Second)
	mu.Lock()
	defer mu.Unlock()
	for job, a := range attempts {
		if len(a) != 1 || a[0] != 1 {
			t.Errorf("%s handled at attempts %v, want once at attempt 1 (its lease kept while it waited)", job, a)
		}
	}
}

// Workers claim no more jobs than they have free slots, whatever their
// claim lanes: with Concurrency 3 and every handler blocked, the broker
// shows 3 jobs leased (the others wait for any worker, their leases not
// running), then the rest are claimed as handlers finish, each once.
func TestWorkersClaimNoMoreThanTheyCanRun(t *testing.T) {
	t.Parallel()
	q := platform.DefaultQueueSpec("shipment-jobs")
	_, js, ctx := queueFabric(t, 1, q, 60*time.Second)
	release := make(chan struct{})
	var running atomic.Int32
	var mu sync.Mutex
	count := map[string]int{}
	startWorkers(t, ctx, js, WorkersConfig{Queue: "shipment-jobs", Concurrency: 3, NoDLQRouter: true},
		func(ctx context.Context, m *Message) error {
			running.Add(1)
			defer running.Add(-1)
			mu.Lock()
			count[string(m.Data)]++
			mu.Unlock()
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		})
	for i := range 10 {
		publishJob(t, ctx, js, "shipment-jobs.ship", fmt.Appendf(nil, "job-%d", i))
	}
	c, err := js.Consumer(ctx, "shipment-jobs", platform.QueueConsumer)
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if n := running.Load(); n != 3 {
			return fmt.Errorf("%d handlers running, want 3", n)
		}
		return nil
	})
	for range 5 { // the lanes' requests keep waiting for a free slot
		info, err := c.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Waiting read 6 once under load: nats-server (consumer.go
		// getNextMsg) puts a job it took for a pull request that is gone
		// by then on its redelivery queue, counted in neither figure.
		if info.NumAckPending != 3 || info.NumPending > 7 {
			t.Fatalf("leased %d and waiting %d with 3 handlers blocked, want 3 and at most 7", info.NumAckPending, info.NumPending)
		}
		time.Sleep(300 * time.Millisecond)
	}
	close(release)
	waitLen(t, 15*time.Second, &mu, func() int { return len(count) }, 10, "jobs handled")
	mu.Lock()
	defer mu.Unlock()
	for id, n := range count {
		if n != 1 {
			t.Errorf("%s handled %d times, want once", id, n)
		}
	}
}

// queue describe lists the queue's Workers instances from their
// sessions: a live one with the job it holds, then, once it crashed and
// its session went unrenewed past its TTL (no live peer to reclaim it),
// the same one lost.
func TestQueueDescribeShowsWorkers(t *testing.T) {
	t.Parallel()
	q := platform.DefaultQueueSpec("shipment-jobs")
	_, js, ctx := queueFabric(t, 1, q, 60*time.Second)
	r := catalog.NewReconciler(js, catalog.ReconcilerOptions{})
	entered := make(chan struct{}, 1)
	w := startWorkers(t, ctx, js, WorkersConfig{Queue: "shipment-jobs", Concurrency: 2, ID: "box-1", NoDLQRouter: true,
		SessionHeartbeat: 100 * time.Millisecond, SessionTTL: time.Second}, heldUntilCancelled(entered))
	publishJob(t, ctx, js, "shipment-jobs.ship", []byte("job"))
	<-entered
	describe := func(want platform.WorkerSession) {
		t.Helper()
		natstest.WaitFor(t, 10*time.Second, func() error {
			st, err := r.DescribeQueue(ctx, "shipment-jobs")
			if err != nil {
				return err
			}
			if len(st.Workers) != 1 || st.WorkersError != "" {
				return fmt.Errorf("workers %+v (%s)", st.Workers, st.WorkersError)
			}
			if got := st.Workers[0]; got.ID != want.ID || got.Jobs != want.Jobs || got.Lost != want.Lost {
				return fmt.Errorf("worker %+v, want %+v", got, want)
			}
			return nil
		})
	}
	describe(platform.WorkerSession{ID: "box-1", Jobs: 1})
	w.crash()
	describe(platform.WorkerSession{ID: "box-1", Jobs: 1, Lost: true})
	st, err := r.DescribeQueue(ctx, "shipment-jobs")
	if err != nil {
		t.Fatal(err)
	}
	if s := st.Workers[0].Silent; s <= time.Second {
		t.Errorf("lost worker silent for %s, want more than its 1s TTL", s)
	}
}
