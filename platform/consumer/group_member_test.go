package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog/catalogtest"
)

func fastMember(group, id string) MemberConfig {
	return MemberConfig{
		Group: group, ID: id, Heartbeat: 100 * time.Millisecond, TTL: 1200 * time.Millisecond,
		DrainTimeout: 2 * time.Second,
		Retry:        RetryPolicy{Delays: []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond}, MaxAttempts: 5},
	}
}

func startMember(t *testing.T, js jetstream.JetStream, cfg MemberConfig, h Handler) *Member {
	t.Helper()
	m, err := NewMember(js, cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(natstest.Context(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	return m
}

// settled waits until every member's partitions match the assignment and
// together cover all partitions exactly once (or none, for idle ones).
func settled(members []*Member, partitions int) error {
	seen := map[int]string{}
	for _, m := range members {
		for _, p := range m.Partitions() {
			if o, dup := seen[p]; dup {
				return fmt.Errorf("partition %d held by %s and %s", p, o, m.ID())
			}
			seen[p] = m.ID()
		}
	}
	if len(seen) != partitions {
		return fmt.Errorf("%d of %d partitions held", len(seen), partitions)
	}
	return nil
}

// 12 members share 24 partitions 2 each; 13 more joining take only what
// they need (sticky): 24 members hold 1 each, the 25th none.
func TestGroupSpreadsEvenlyAndSticky(t *testing.T) {
	t.Parallel()
	_, js := catalogtest.GroupFabric(t, "orders", 24, "email-notifier")
	noop := func(context.Context, *Message) error { return nil }
	var members []*Member
	for i := range 12 {
		members = append(members, startMember(t, js, fastMember("email-notifier", fmt.Sprintf("m%02d", i)), noop))
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		if err := settled(members, 24); err != nil {
			return err
		}
		for _, m := range members {
			if n := len(m.Partitions()); n != 2 {
				return fmt.Errorf("%s holds %d partitions, want 2", m.ID(), n)
			}
		}
		return nil
	})
	before := map[string][]int{}
	for _, m := range members {
		before[m.ID()] = m.Partitions()
	}
	for i := 12; i < 25; i++ {
		members = append(members, startMember(t, js, fastMember("email-notifier", fmt.Sprintf("m%02d", i)), noop))
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		if err := settled(members, 24); err != nil {
			return err
		}
		idle := 0
		for _, m := range members {
			switch n := len(m.Partitions()); n {
			case 0:
				idle++
			case 1:
			default:
				return fmt.Errorf("%s holds %d partitions", m.ID(), n)
			}
		}
		if idle != 1 {
			return fmt.Errorf("%d idle members, want 1", idle)
		}
		return nil
	})
	for _, m := range members[:12] {
		for _, p := range m.Partitions() {
			if !slices.Contains(before[m.ID()], p) {
				t.Errorf("%s moved: had %v, now holds %d (only orphaned or surplus partitions may move)", m.ID(), before[m.ID()], p)
			}
		}
	}
}

// fencedStore is a handler's database: it records an effect once per
// event (an inbox) and refuses writes carrying a fence lower than the
// highest seen for the partition. It checks per-key order: the first
// effect of event n of a key comes after that of event n-1.
type fencedStore struct {
	mu        sync.Mutex
	fence     map[int]uint64
	done      map[string]int // key -> highest n applied
	applied   int
	stale     int
	repeats   int
	orderErrs []string
}

func newFencedStore() *fencedStore {
	return &fencedStore{fence: map[int]uint64{}, done: map[string]int{}}
}

func (s *fencedStore) apply(m *Message) error {
	n, _ := strconv.Atoi(string(m.Data))
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.Fence() < s.fence[m.Partition] {
		s.stale++
		return Permanent(errors.New("stale fence"))
	}
	s.fence[m.Partition] = m.Fence()
	switch d := s.done[m.Key]; {
	case n <= d:
		s.repeats++
	case n == d+1:
		s.done[m.Key] = n
		s.applied++
	default:
		s.orderErrs = append(s.orderErrs, fmt.Sprintf("%s: event %d before %d (partition %d, seq %d, attempt %d, fence %d)", m.Key, n, d+1, m.Partition, m.Seq, m.Attempt, m.Fence()))
	}
	return nil
}

// A member killed in the middle of handling: its partitions move to the
// others, nothing is lost, per-key order holds, and the dead member's
// late write is refused by its fence.
func TestGroupMemberKilledMidHandling(t *testing.T) {
	t.Parallel()
	f, js := catalogtest.GroupFabric(t, "orders", 6, "fraud-monitor")
	store := newFencedStore()
	handler := func(ctx context.Context, m *Message) error {
		time.Sleep(2 * time.Millisecond)
		return store.apply(m)
	}
	// The victim blocks in its handler once it has handled a few events.
	block, entered := make(chan struct{}), make(chan struct{}, 1)
	var victimCount int
	var vmu sync.Mutex
	victimHandler := func(ctx context.Context, m *Message) error {
		vmu.Lock()
		victimCount++
		c := victimCount
		vmu.Unlock()
		if c == 20 {
			entered <- struct{}{}
			<-block
		}
		return handler(ctx, m)
	}
	victimConn := f.Conn()
	vjs, _ := jetstream.New(victimConn)
	victim := startMember(t, vjs, fastMember("fraud-monitor", "a-victim"), victimHandler)
	var others []*Member
	for _, id := range []string{"b", "c"} {
		others = append(others, startMember(t, f.JetStream(), fastMember("fraud-monitor", id), handler))
	}
	all := append([]*Member{victim}, others...)
	natstest.WaitFor(t, 20*time.Second, func() error { return settled(all, 6) })

	ctx := natstest.Context(t, 60*time.Second)
	const keys, perKey = 30, 10
	for n := 1; n <= perKey; n++ {
		for k := range keys {
			publishEvent(t, ctx, js, platform.Event{ID: fmt.Sprintf("k%d-%d", k, n), Topic: "orders", Key: fmt.Sprintf("order:%d", k), Payload: []byte(strconv.Itoa(n))})
		}
	}
	received(t, entered, 20*time.Second, "victim never handled 20 events")
	victim.crash()
	victimConn.Close()
	natstest.WaitFor(t, 30*time.Second, func() error {
		if err := settled(others, 6); err != nil {
			return err
		}
		store.mu.Lock()
		defer store.mu.Unlock()
		if store.applied != keys*perKey {
			return fmt.Errorf("%d of %d events applied", store.applied, keys*perKey)
		}
		return nil
	})
	close(block) // the dead member's handler finishes late
	natstest.WaitFor(t, 5*time.Second, func() error {
		store.mu.Lock()
		defer store.mu.Unlock()
		if store.stale == 0 {
			return errors.New("the late write of the dead member was not refused")
		}
		return nil
	})
	store.mu.Lock()
	defer store.mu.Unlock()
	if len(store.orderErrs) > 0 {
		t.Fatalf("per-key order broken: %v", store.orderErrs)
	}
	t.Logf("applied %d, repeats caught by the inbox %d, stale writes fenced %d", store.applied, store.repeats, store.stale)
}

// A member that stalls (cannot renew its membership) loses its partition:
// it stops pulling, the new owner's pin and reset take over, and its late
// result is never acknowledged.
func TestGroupStaleMemberCannotAck(t *testing.T) {
	t.Parallel()
	_, js := catalogtest.GroupFabric(t, "orders", 1, "sales-analytics")
	block := make(chan struct{})
	entered := make(chan uint64, 1)
	staleMetrics, freshMetrics := NewMetrics(), NewMetrics()
	acfg := fastMember("sales-analytics", "a")
	acfg.Metrics = staleMetrics
	a := startMember(t, js, acfg, func(ctx context.Context, m *Message) error {
		entered <- m.Fence()
		<-block
		return nil
	})
	natstest.WaitFor(t, 10*time.Second, func() error { return settled([]*Member{a}, 1) })
	publishEvent(t, natstest.Context(t, 10*time.Second), js, platform.Event{ID: "e1", Topic: "orders", Key: "order:1", Payload: []byte("1")})
	fenceA := <-entered
	a.paused.Store(true) // a stalls: no more heartbeats

	handledByB := make(chan uint64, 4)
	bcfg := fastMember("sales-analytics", "b")
	bcfg.Metrics = freshMetrics
	b := startMember(t, js, bcfg, func(ctx context.Context, m *Message) error {
		handledByB <- m.Fence()
		return nil
	})
	fenceB := received(t, handledByB, 20*time.Second, "the new owner never got the event")
	if fenceB <= fenceA {
		t.Fatalf("fence of the new owner %d is not above the stale one's %d", fenceB, fenceA)
	}
	// NATS's part: the partition is pinned to b, so a pull by any other
	// client gets nothing.
	c, err := js.Consumer(natstest.Context(t, 5*time.Second), "orders", platform.PartitionConsumer("sales-analytics", 0))
	if err != nil {
		t.Fatal(err)
	}
	publishEvent(t, natstest.Context(t, 10*time.Second), js, platform.Event{ID: "e2", Topic: "orders", Key: "order:2", Payload: []byte("1")})
	batch, err := c.Fetch(1, jetstream.FetchMaxWait(500*time.Millisecond), jetstream.FetchPriorityGroup("sales-analytics"))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		t.Fatalf("an unpinned client pulled %s", m.Subject())
	}
	// The platform's part: a's handler returns, and a acks nothing.
	close(block)
	time.Sleep(500 * time.Millisecond)
	if n := counterSum(t, staleMetrics, "platform_consumer_processed_total"); n != 0 {
		t.Fatalf("the stale member acknowledged %v events", n)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if n := counterSum(t, freshMetrics, "platform_consumer_processed_total"); n != 2 {
			return fmt.Errorf("new owner acked %v events, want 2", n)
		}
		return nil
	})
	_ = b
}

// Start keeps trying its first membership record until its context ends,
// not for one heartbeat: here every put has a microsecond, so Start must
// fail only at its own deadline, saying what it was doing.
func TestMemberStartJoinsWithinItsContextNotOneHeartbeat(t *testing.T) {
	t.Parallel()
	_, js := catalogtest.GroupFabric(t, "orders", 2, "email-notifier")
	cfg := fastMember("email-notifier", "slow")
	cfg.Heartbeat, cfg.TTL = time.Microsecond, time.Second
	m, err := NewMember(js, cfg, func(context.Context, *Message) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	err = m.Start(natstest.Context(t, 700*time.Millisecond))
	if err == nil {
		_ = m.Close(context.Background())
		t.Fatal("Start joined with puts that cannot finish")
	}
	if took := time.Since(began); took < 600*time.Millisecond || !strings.Contains(err.Error(), "join (membership record)") {
		t.Fatalf("Start failed after %s with %v: want its 700ms deadline and the join named", took, err)
	}
}

// A delivery that goes to a pull request nobody reads any more (as one
// nats.go gave up on while the server still held it) does not break the
// key's order: the runner sees the jump in the consumer's delivery
// sequence, takes nothing newer, and resets the consumer, so the lost
// event comes again before the key's later ones, long before its
// AckWait (30 s) would have brought it back. Another key, parked with
// events queued behind it (its retry 5 s away), holds none of that up
// and keeps its order too. Events acknowledged above the ack floor (the
// parked one holds it down) may come again with the reset: at least
// once, as after any handover, so each key's order is checked on the
// events' first handling.
func TestGroupKeepsKeyOrderWhenADeliveryIsLost(t *testing.T) {
	t.Parallel()
	f, js := catalogtest.GroupFabric(t, "ledger", 1, "books")
	var mu sync.Mutex
	var order, parked []int // each event's first handling
	seen := map[int]bool{}
	failed := false
	metrics := NewMetrics()
	cfg := fastMember("books", "m1")
	cfg.Metrics = metrics
	cfg.Retry = RetryPolicy{Delays: []time.Duration{5 * time.Second}, MinDelay: 5 * time.Second, MaxAttempts: 5}
	startMember(t, js, cfg, func(_ context.Context, m *Message) error {
		n, err := strconv.Atoi(string(m.Data))
		if err != nil {
			return Permanent(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if n == 100 && !failed {
			failed = true
			return errors.New("ledger busy") // parked: retried in 5 s
		}
		if seen[n] {
			return nil
		}
		seen[n] = true
		if m.Key == "acct:2" {
			parked = append(parked, n)
		} else {
			order = append(order, n)
		}
		return nil
	})
	ctx := natstest.Context(t, 60*time.Second)
	publish := func(i int) {
		t.Helper()
		publishEvent(t, ctx, js, platform.Event{ID: fmt.Sprintf("entry-%d", i), Topic: "ledger", Key: "acct:1", Payload: []byte(strconv.Itoa(i))})
	}
	handled := func(n int) {
		t.Helper()
		natstest.WaitFor(t, 10*time.Second, func() error {
			mu.Lock()
			defer mu.Unlock()
			if len(order) < n {
				return fmt.Errorf("%d of %d handled: %v", len(order), n, order)
			}
			return nil
		})
	}
	publish(0)
	handled(1) // the member holds the consumer's pin
	for i := 100; i < 103; i++ {
		publishEvent(t, ctx, js, platform.Event{ID: fmt.Sprintf("entry-%d", i), Topic: "ledger", Key: "acct:2", Payload: []byte(strconv.Itoa(i))})
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if !failed {
			return errors.New("acct:2's first event not attempted yet")
		}
		return nil
	})

	stream, consumer := platform.StreamName("ledger"), platform.PartitionConsumer("books", 0)
	c, err := js.Consumer(ctx, stream, consumer)
	if err != nil {
		t.Fatal(err)
	}
	pin := ""
	for _, g := range c.CachedInfo().PriorityGroups {
		if g.Group == "books" {
			pin = g.PinnedClientID
		}
	}
	if pin == "" {
		t.Fatalf("no pinned client: %+v", c.CachedInfo().PriorityGroups)
	}
	// A pull request with the member's pin, which nobody will ack.
	nc := f.Conn()
	inbox := nats.NewInbox()
	lost, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(map[string]any{"batch": 1, "expires": int64(30 * time.Second), "group": "books", "id": pin})
	if err := nc.PublishRequest("$JS.API.CONSUMER.MSG.NEXT."+stream+"."+consumer, inbox, body); err != nil {
		t.Fatal(err)
	}
	i := 1
	for ; ; i++ {
		if i == 60 {
			t.Fatalf("no delivery went to the stale request in %d events", i)
		}
		publish(i)
		if _, err := lost.NextMsg(200 * time.Millisecond); err == nil {
			break
		}
	}
	t.Logf("event %d went to the stale request", i)
	total := i + 6
	for j := i + 1; j < total; j++ {
		publish(j)
	}
	handled(total)
	natstest.WaitFor(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(parked) < 3 {
			return fmt.Errorf("the parked key handled %v", parked)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	for k, n := range order {
		if n != k {
			t.Fatalf("handled %v: want 0..%d in order", order, total-1)
		}
	}
	if !slices.Equal(parked, []int{100, 101, 102}) {
		t.Errorf("the parked key handled %v, want 100 101 102", parked)
	}
	if v := counterSum(t, metrics, "platform_consumer_lost_delivery_resets_total"); v != 1 {
		t.Errorf("platform_consumer_lost_delivery_resets_total = %v, want 1", v)
	}
}
