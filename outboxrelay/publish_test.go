package outboxrelay

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestPublisherRoutesOutcomes: the JetStream ack and error handlers report
// each publish once, to the pipeline that made it, classified as the
// relay counts it; once a pipeline is forgotten (its term ended), late
// outcomes of its publishes are dropped and never reach its channel.
func TestPublisherRoutesOutcomes(t *testing.T) {
	p := newPublisher(5 * time.Second)
	a, b := make(chan ackResult, 4), make(chan ackResult, 4)
	msg := func(to chan ackResult, id string) *nats.Msg {
		m := &nats.Msg{Subject: "t." + id}
		p.pending[m] = pubItem{k: &keyState{id: id}, rec: Record{Seq: 1, Event: Event{ID: id}}, sent: time.Now(), to: to}
		return m
	}
	m1, m2, m3, m4 := msg(a, "e1"), msg(a, "e2"), msg(b, "e3"), msg(b, "e4")

	p.acked(nil, m1, &jetstream.PubAck{Stream: "s", Duplicate: true})
	p.acked(nil, m1, &jetstream.PubAck{Stream: "s"}) // reported already
	if len(a) != 1 {
		t.Fatalf("pipeline a got %d outcomes for one publish, want 1", len(a))
	}
	if r := <-a; r.rec.ID != "e1" || r.k.id != "e1" || r.err != nil || r.out != OutcomeDuplicate || !r.ack.Duplicate || r.ack.Latency <= 0 {
		t.Fatalf("ack of e1: %+v, want a duplicate with its latency", r)
	}

	p.failed(nil, m3, jetstream.ErrAsyncPublishTimeout)
	r := <-b
	if r.rec.ID != "e3" || r.out != OutcomeUnknown || !errors.Is(r.err, jetstream.ErrAsyncPublishTimeout) || !strings.Contains(r.err.Error(), "no ack within 5s") {
		t.Fatalf("timeout of e3: out %s, err %v; want unknown, wrapping ErrAsyncPublishTimeout", r.out, r.err)
	}
	p.failed(nil, m4, jetstream.ErrNoStreamResponse)
	if r := <-b; r.rec.ID != "e4" || r.out != OutcomeError || !errors.Is(r.err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("no stream for e4: out %s, err %v; want error", r.out, r.err)
	}

	p.forget(a)
	p.acked(nil, m2, &jetstream.PubAck{Stream: "s"})
	p.failed(nil, m2, nats.ErrDisconnected)
	if len(a) != 0 || len(p.pending) != 0 {
		t.Fatalf("after forget: %d outcomes reached pipeline a, %d publishes pending; want none", len(a), len(p.pending))
	}
}
