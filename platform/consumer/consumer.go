package consumer

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/dlq"
)

// Handler handles one event. A nil error acknowledges it. Any other error
// is transient (retried with backoff, then dead-lettered) unless it wraps
// Permanent or DecodeError (dead-lettered at once). A panic is a
// transient error. ctx carries the producer's trace (traceparent) and is
// cancelled when the member loses the partition or closes.
type Handler func(ctx context.Context, msg *Message) error

// Message is one delivery of an event to a handler.
type Message struct {
	// Subject is the stored subject (<topic>.<partition>.<key> for
	// topics, <queue>.<...> for queues).
	Subject string
	// Key and Partition are the event's key and partition (topics only).
	Key       string
	Partition int
	Data      []byte
	Header    nats.Header
	// Seq is the event's stream sequence, stable across redeliveries.
	Seq uint64
	// Attempt is this delivery's number as the broker counts it (1 for
	// the first).
	Attempt int
	// Published is the broker's append time.
	Published time.Time

	fence   uint64
	raw     jetstream.Msg
	outcome outcome // set by the chain's settling step
}

// Canary reports whether the message is a canary. The runtime never hands
// one to a handler; this is for consumers built on other clients.
func (m Message) Canary() bool { return platform.IsCanary(m.Header) }

// Tombstone reports whether the message deletes its key (compacted
// topics): the handler should delete its state for m.Key.
func (m Message) Tombstone() bool { return platform.IsTombstone(m.Header) }

// Fence returns the fencing token of the delivery: the assignment
// generation at which this member took the partition over. It increases
// with every change of owner, so a store that records the highest fence
// seen per partition (or per key) and rejects writes carrying a lower
// one never accepts a write from a member that has lost the partition.
// Zero for queue jobs.
func (m *Message) Fence() uint64 { return m.fence }

// InProgress renews the delivery's lease (the consumer's AckWait). The
// runtime renews it on its own while the handler runs; queue workers stop
// renewing at the queue's MaxLease.
func (m *Message) InProgress() error { return m.raw.InProgress() }

func newMessage(raw jetstream.Msg, meta *jetstream.MsgMetadata, fence uint64) *Message {
	return &Message{
		Subject: raw.Subject(), Data: raw.Data(), Header: raw.Headers(),
		Seq: meta.Sequence.Stream, Attempt: int(meta.NumDelivered), Published: meta.Timestamp,
		fence: fence, raw: raw,
	}
}

// settler is the state the delivery chain's steps share (chain.go), for
// one consumer of one topic or queue: who it is, its retry policy and
// budget, its metrics, and the first failures it has seen.
type settler struct {
	js          jetstream.JetStream
	object      string // topic or queue name
	stream      string
	consumer    string
	group       string // group or queue name (metrics, DLQ entry)
	policy      RetryPolicy
	maxAttempts int
	budget      *budget
	metrics     *Metrics
	partition   string      // metrics label ("" for queues)
	fenced      func() bool // checked right before anything is sent to the broker

	failures  *dlq.FirstFailures // dlq.FirstFailuresBucket (nil: memory only)
	mu        sync.Mutex
	firstFail map[uint64]time.Time // by stream seq, this process's view
	groups    map[string]bool      // groups consuming the topic (consumer_redrive.go)
}

func newSettler(js jetstream.JetStream, object, consumer, group string, policy RetryPolicy, maxDeliver int, b *budget, m *Metrics, partition string, fenced func() bool) *settler {
	attempts := policy.MaxAttempts
	if maxDeliver > 0 {
		attempts = maxDeliver // the broker's count wins
	}
	return &settler{
		js: js, object: object, stream: platform.StreamName(object), consumer: consumer, group: group,
		policy: policy, maxAttempts: attempts, budget: b, metrics: m, partition: partition, fenced: fenced,
		firstFail: map[uint64]time.Time{},
	}
}

// recordFirst records now as the event's first failure in the bucket,
// off the settling path (the retry's NAK is not held up by it; a crash in
// between loses only that record), and adopts an earlier time recorded by
// another process.
func (s *settler) recordFirst(seq uint64, now time.Time) {
	if s.failures == nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		t := s.failures.Record(ctx, s.stream, s.consumer, seq, now)
		if !t.Before(now) {
			return
		}
		s.mu.Lock()
		if cur, ok := s.firstFail[seq]; ok && t.Before(cur) {
			s.firstFail[seq] = t
		}
		s.mu.Unlock()
	}()
}

// forget drops the event's first failure, here and in the bucket if it
// may be there (a record is made only before a retry, so only a later
// attempt can find one).
func (s *settler) forget(ctx context.Context, msg *Message) {
	s.mu.Lock()
	delete(s.firstFail, msg.Seq)
	s.mu.Unlock()
	if msg.Attempt > 1 {
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		s.failures.Forget(fctx, s.stream, s.consumer, msg.Seq)
		cancel()
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// readBatch hands each event of batch to fn until the server ends the
// pull request (its batch filled, or its expiry's 408), and returns how
// many it handed. A request is never abandoned at a client deadline: one
// the server still holds would take the next event to an inbox nobody
// reads, pending until its AckWait, while the next pull got the events
// after it. Only stop (a shutdown; nil for none) ends the reading early;
// what reaches the request then waits out its AckWait.
func readBatch(stop <-chan struct{}, batch jetstream.MessageBatch, fn func(jetstream.Msg)) (n int) {
	msgs := batch.Messages()
	for {
		select {
		case msg, ok := <-msgs:
			if !ok {
				return n
			}
			n++
			fn(msg)
		case <-stop:
			return n
		}
	}
}

// isFetchIdle reports whether a fetch error only means "nothing came".
func isFetchIdle(err error) bool {
	return err == nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrNoMessages)
}
