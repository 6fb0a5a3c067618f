package outboxrelay

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/platform"
)

// publisher routes the outcome of each async publish to the pipeline that
// made it. The relay's JetStream context reports outcomes through its ack
// and error handlers (WithPublishAsyncAckHandler, WithPublishAsyncErrHandler),
// called on the connection's reply goroutine, instead of a future per
// publish: no goroutine, channels or select per event, and one hand-off
// (reply goroutine -> pipeline) between an ack and the key's next publish.
//
// The ack timeout is the JetStream context's (WithPublishAsyncTimeout =
// AckTimeout): the error handler then gets ErrAsyncPublishTimeout, counted
// as unknown, so no timer of its own is needed per publish. A reconnect
// fails every pending publish with nats.ErrDisconnected (unknown too).
type publisher struct {
	ackTimeout time.Duration

	mu      sync.Mutex
	pending map[*nats.Msg]pubItem // published, outcome not yet reported
}

// pubItem is one publish awaiting its outcome.
type pubItem struct {
	k    *keyState
	rec  Record
	sent time.Time
	to   chan<- ackResult // the publishing pipeline's
}

func newPublisher(ackTimeout time.Duration) *publisher {
	return &publisher{ackTimeout: ackTimeout, pending: map[*nats.Msg]pubItem{}}
}

// options are the JetStream options routing the outcomes to p.
func (p *publisher) options() []jetstream.JetStreamOpt {
	return []jetstream.JetStreamOpt{
		jetstream.WithPublishAsyncAckHandler(p.acked),
		jetstream.WithPublishAsyncErrHandler(p.failed),
	}
}

// report sends the outcome of m's publish to its pipeline, unless it was
// reported already or the pipeline forgot it. The send never blocks (see
// runPipeline) and happens under p.mu, so after forget returns nothing more
// reaches the pipeline's channel.
func (p *publisher) report(m *nats.Msg, res func(it pubItem) ackResult) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	it, ok := p.pending[m]
	if !ok {
		return false
	}
	delete(p.pending, m)
	it.to <- res(it)
	return true
}

func (p *publisher) acked(_ jetstream.JetStream, m *nats.Msg, ack *jetstream.PubAck) {
	p.report(m, func(it pubItem) ackResult {
		res := ackResult{k: it.k, rec: it.rec, ack: Ack{Duplicate: ack.Duplicate, Latency: time.Since(it.sent)}, out: OutcomeOK}
		if ack.Duplicate {
			res.out = OutcomeDuplicate
		}
		return res
	})
}

func (p *publisher) failed(_ jetstream.JetStream, m *nats.Msg, err error) {
	p.report(m, func(it pubItem) ackResult {
		if errors.Is(err, jetstream.ErrAsyncPublishTimeout) {
			err = fmt.Errorf("no ack within %s (outcome unknown, will retry with the same id): %w", p.ackTimeout, err)
		}
		return ackResult{k: it.k, rec: it.rec, err: fmt.Errorf("outboxrelay: publish event %s: %w", it.rec.ID, err), out: classify(err)}
	})
}

// forget drops the pending publishes of the pipeline reporting on to:
// their outcomes, arriving later, are ignored (the records stay unmarked,
// so the next term republishes them with the same Nats-Msg-Id).
func (p *publisher) forget(to chan<- ackResult) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for m, it := range p.pending {
		if it.to == to {
			delete(p.pending, m)
		}
	}
}

// message is rec as published: its headers and Nats-Msg-Id = its ID.
func (r *Relay) message(rec Record) *nats.Msg {
	msg := &nats.Msg{
		Subject: platform.TopicSubject(r.cfg.topicFor(rec.Topic), rec.Key),
		Data:    rec.Payload,
		Header:  make(nats.Header, len(rec.Headers)+1),
	}
	for name, v := range rec.Headers {
		msg.Header[name] = append([]string(nil), v...)
	}
	// As jetstream.WithMsgID would, without the options' allocations.
	msg.Header[jetstream.MsgIDHeader] = []string{rec.ID}
	return msg
}

// publish publishes the head of k, in a fast batch of its topic when a
// backlog is waiting (fastbatch.go), else by a single async publish; its
// outcome is reported on acks.
func (r *Relay) publish(k *keyState, backlog int, acks chan<- ackResult) {
	rec := k.recs[0]
	msg := r.message(rec)
	if !r.cfg.SinglePublishes && rec.Seq > k.singleThrough && r.batch.add(k, msg, rec, r.cfg.topicFor(rec.Topic), backlog, acks) {
		return
	}
	r.publishAsync(k, rec, msg, acks)
}

// publishAsync publishes msg (the head of k) by a single async publish.
func (r *Relay) publishAsync(k *keyState, rec Record, msg *nats.Msg, acks chan<- ackResult) {
	r.pub.mu.Lock()
	r.pub.pending[msg] = pubItem{k: k, rec: rec, sent: time.Now(), to: acks}
	r.pub.mu.Unlock()
	if _, err := r.js.PublishMsgAsync(msg); err != nil {
		// Not published (no handler will report it).
		r.pub.report(msg, func(pubItem) ackResult {
			err := fmt.Errorf("outboxrelay: publish %s (event %s): %w", msg.Subject, rec.ID, err)
			return ackResult{k: k, rec: rec, err: err, out: classify(err)}
		})
	}
}
