package consumer

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog/catalogtest"
	"github.com/msgplatform/platform/platform/dlq"
)

// recordingTracer is a minimal OpenTelemetry TracerProvider (the SDK is
// not a dependency of the module): it makes real span contexts, children
// of the span context in their ctx, and records the spans whose name
// contains filter.
type recordingTracer struct {
	embedded.TracerProvider
	filter string

	mu    sync.Mutex
	spans []recordedSpan
}

type recordedSpan struct {
	name   string
	kind   trace.SpanKind
	parent trace.SpanContext
	sc     trace.SpanContext
}

// liveSpan is a non-recording span with a span context of its own.
type liveSpan struct {
	trace.Span
	sc trace.SpanContext
}

func (s liveSpan) SpanContext() trace.SpanContext { return s.sc }
func (s liveSpan) IsRecording() bool              { return true }

func (r *recordingTracer) Tracer(string, ...trace.TracerOption) trace.Tracer { return tracerOf{r: r} }

type tracerOf struct {
	embedded.Tracer
	r *recordingTracer
}

func (t tracerOf) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	return t.r.Start(ctx, name, opts...)
}

func (r *recordingTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	parent := trace.SpanContextFromContext(ctx)
	tid := parent.TraceID()
	if !tid.IsValid() {
		_, _ = rand.Read(tid[:])
	}
	var sid trace.SpanID
	_, _ = rand.Read(sid[:])
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
	if strings.Contains(name, r.filter) {
		r.mu.Lock()
		r.spans = append(r.spans, recordedSpan{name: name, kind: cfg.SpanKind(), parent: parent, sc: sc})
		r.mu.Unlock()
	}
	return trace.ContextWithSpan(ctx, liveSpan{Span: noop.Span{}, sc: sc}), liveSpan{Span: noop.Span{}, sc: sc}
}

func (r *recordingTracer) recorded() []recordedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recordedSpan(nil), r.spans...)
}

// The producer's W3C trace context travels in the event's headers and the
// handler runs in a consumer span that is its child: same trace id, the
// producer's span as parent.
func TestGroupTracePropagatesFromPublisher(t *testing.T) {
	t.Parallel()
	_, js := catalogtest.GroupFabric(t, "traced", 2, "tracer-group", natstest.WithSyncAlways(false))
	tp := &recordingTracer{filter: "traced."}
	otel.SetTracerProvider(tp) // the runtime's spans go to the global provider

	type seen struct {
		header string
		sc     trace.SpanContext
	}
	got := make(chan seen, 4)
	startMember(t, js, fastMember("tracer-group", "m1"), func(ctx context.Context, m *Message) error {
		got <- seen{header: m.Header.Get("traceparent"), sc: trace.SpanContextFromContext(ctx)}
		return nil
	})
	ctx := natstest.Context(t, 30*time.Second)
	pctx, producer := tp.Start(ctx, "checkout place-order")
	publishEvent(t, pctx, js, platform.Event{ID: "evt-trace-1", Topic: "traced", Key: "order:T1", Payload: []byte("{}")})
	want := producer.SpanContext()
	s := received(t, got, 20*time.Second, "handler never ran")
	wantHeader := fmt.Sprintf("00-%s-%s-01", want.TraceID(), want.SpanID())
	if s.header != wantHeader {
		t.Errorf("traceparent header = %q, want %q", s.header, wantHeader)
	}
	if !s.sc.IsValid() || s.sc.TraceID() != want.TraceID() {
		t.Fatalf("handler ctx span context %v, want trace id %s", s.sc, want.TraceID())
	}
	if s.sc.SpanID() == want.SpanID() {
		t.Errorf("handler runs in the producer's span itself, want a child span")
	}
	var consumer *recordedSpan
	for _, sp := range tp.recorded() {
		if sp.sc.SpanID() == s.sc.SpanID() {
			consumer = &sp
		}
	}
	if consumer == nil {
		t.Fatalf("the handler's span was not started by the global tracer provider: %+v", tp.recorded())
	}
	if consumer.kind != trace.SpanKindConsumer || consumer.parent.SpanID() != want.SpanID() || !consumer.parent.IsRemote() {
		t.Errorf("consumer span %q: kind %v, parent %s (remote %v); want consumer, remote parent %s",
			consumer.name, consumer.kind, consumer.parent.SpanID(), consumer.parent.IsRemote(), want.SpanID())
	}
}

// A dependency outage: every event fails. The retry budget (3 tokens, no
// refill) lets 3 fast retries through; every other retry waits the
// policy's longest delay, so the outage becomes a trickle, not a storm,
// and no event is lost (each comes back after the longest delay).
func TestGroupRetryBudgetStopsRetryStorm(t *testing.T) {
	t.Parallel()
	_, js := catalogtest.GroupFabric(t, "inventory", 1, "reserver", natstest.WithSyncAlways(false))
	ctx := natstest.Context(t, 60*time.Second)
	const keys = 10
	for k := range keys {
		publishEvent(t, ctx, js, platform.Event{ID: fmt.Sprintf("inv-%d", k), Topic: "inventory", Key: fmt.Sprintf("sku:%d", k), Payload: []byte("x")})
	}
	const longest = 2 * time.Second
	var mu sync.Mutex
	var first time.Time
	attempts := map[string][]time.Time{}
	cfg := fastMember("reserver", "m1")
	cfg.Retry = RetryPolicy{
		Delays: []time.Duration{20 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond, longest},
		Budget: RetryBudget{Burst: 3, PerSecond: 0},
	}
	cfg.Metrics = NewMetrics()
	m := startMember(t, js, cfg, func(ctx context.Context, msg *Message) error {
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		if first.IsZero() {
			first = now
		}
		attempts[msg.Key] = append(attempts[msg.Key], now)
		return errors.New("inventory service unavailable")
	})
	count := func(before time.Duration) (n int) {
		mu.Lock()
		defer mu.Unlock()
		for _, ts := range attempts {
			for _, at := range ts {
				if at.Sub(first) < before {
					n++
				}
			}
		}
		return n
	}
	// Within the first second: every first attempt, and only the 3 retries
	// the budget paid for (without a budget: 4 fast retries per key).
	natstest.WaitFor(t, 20*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if first.IsZero() || time.Since(first) < 1500*time.Millisecond {
			return errors.New("waiting")
		}
		return nil
	})
	if n := count(time.Second); n != keys+3 {
		t.Errorf("%d deliveries in the first second, want %d (first attempts + 3 budgeted retries)", n, keys+3)
	}
	// Every event comes back, after the longest delay.
	natstest.WaitFor(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		for k := range keys {
			if len(attempts[fmt.Sprintf("sku:%d", k)]) < 2 {
				return fmt.Errorf("sku:%d not retried yet", k)
			}
		}
		return nil
	})
	_ = m.Close(context.Background())
	mu.Lock()
	slow := 0
	for key, ts := range attempts {
		if gap := ts[1].Sub(ts[0]); gap >= longest-100*time.Millisecond {
			slow++
		} else if gap > 500*time.Millisecond {
			t.Errorf("%s: retry after %s: neither a budgeted fast retry nor the longest delay", key, gap)
		}
	}
	mu.Unlock()
	if slow != keys-3 {
		t.Errorf("%d events retried after the longest delay, want %d", slow, keys-3)
	}
	if n := counterSum(t, cfg.Metrics, "platform_consumer_retry_budget_exhausted_total"); n < keys-3 {
		t.Errorf("budget exhausted metric = %v, want >= %d", n, keys-3)
	}
}

// Per-key order across a graceful join and a graceful leave while events
// keep arriving: the partitions that move are drained by their old owner
// and replayed from the ack floor by the new one, so every key's events
// are applied once each, in order; nothing is dead-lettered and no write
// is stale.
func TestGroupOrderAcrossGracefulJoinAndLeave(t *testing.T) {
	t.Parallel()
	const partitions = 6
	f, js := catalogtest.GroupFabric(t, "carts", partitions, "cart-view", natstest.WithSyncAlways(false))
	store := newFencedStore()
	handler := func(ctx context.Context, m *Message) error {
		time.Sleep(3 * time.Millisecond)
		return store.apply(m)
	}
	applied := func() int {
		store.mu.Lock()
		defer store.mu.Unlock()
		return store.applied
	}
	a := startMember(t, js, fastMember("cart-view", "a"), handler)
	b := startMember(t, js, fastMember("cart-view", "b"), handler)
	natstest.WaitFor(t, 20*time.Second, func() error { return settled([]*Member{a, b}, partitions) })

	const keys, perKey = 40, 20
	ctx := natstest.Context(t, 60*time.Second)
	pubErr := make(chan error, 1)
	go func() {
		pub := platform.NewPublisher(f.JetStream(), platform.PublisherOptions{})
		for n := 1; n <= perKey; n++ {
			for k := range keys {
				if _, err := pub.Publish(ctx, platform.Event{ID: fmt.Sprintf("c%d-%d", k, n), Topic: "carts", Key: fmt.Sprintf("cart:%d", k), Payload: []byte(strconv.Itoa(n))}); err != nil {
					pubErr <- err
					return
				}
			}
		}
		pubErr <- nil
	}()
	const total = keys * perKey
	natstest.WaitFor(t, 30*time.Second, func() error {
		if n := applied(); n < total/4 {
			return fmt.Errorf("%d applied", n)
		}
		return nil
	})
	c := startMember(t, js, fastMember("cart-view", "c"), handler) // join
	natstest.WaitFor(t, 20*time.Second, func() error {
		if err := settled([]*Member{a, b, c}, partitions); err != nil {
			return err
		}
		if len(c.Partitions()) != 2 {
			return fmt.Errorf("joiner holds %v", c.Partitions())
		}
		return nil
	})
	// Progress with the joiner: a quarter more, or all of it if the join
	// took long enough (a handover waits for the old owner's pull
	// request to end) for more than three quarters to be applied.
	joinedAt := applied()
	natstest.WaitFor(t, 30*time.Second, func() error {
		if n := applied(); n < min(joinedAt+total/4, total) {
			return fmt.Errorf("%d applied", n)
		}
		return nil
	})
	leftAt := applied()
	if err := b.Close(natstest.Context(t, 10*time.Second)); err != nil { // graceful leave
		t.Fatal(err)
	}
	natstest.WaitFor(t, 20*time.Second, func() error { return settled([]*Member{a, c}, partitions) })
	if err := <-pubErr; err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		if n := applied(); n != total {
			return fmt.Errorf("%d of %d applied", n, total)
		}
		return nil
	})
	store.mu.Lock()
	defer store.mu.Unlock()
	if len(store.orderErrs) > 0 {
		t.Fatalf("per-key order broken: %v", store.orderErrs)
	}
	if store.stale != 0 {
		t.Errorf("%d stale writes in a graceful handover", store.stale)
	}
	if es, err := dlq.Read(ctx, js, "carts"); err != nil || len(es) != 0 {
		t.Errorf("DLQ: %d entries, %v", len(es), err)
	}
	if joinedAt >= total || leftAt >= total {
		t.Logf("warning: the publisher finished before a rebalance (joined at %d, left at %d of %d)", joinedAt, leftAt, total)
	}
	t.Logf("joined at %d, left at %d of %d applied; repeats caught by the inbox %d", joinedAt, leftAt, total, store.repeats)
}
