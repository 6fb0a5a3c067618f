package outboxrelay

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/msgplatform/platform/platform"
)

// Event is one event a service enqueues in its own transaction, to be
// published to Topic with key Key.
type Event struct {
	// ID is required: it becomes the Nats-Msg-Id of every publish of the
	// event, so a republish after a crash is deduplicated by the stream
	// (within its duplicate window) and by the consumers' inboxes (after
	// it). Enqueue refuses an empty ID.
	ID string
	// Topic is the platform topic (or, with Config.TopicMap, a name mapped
	// to one).
	Topic string
	// Key is the partition key: events with one key are published in
	// commit order.
	Key     string
	Headers nats.Header
	Payload []byte
	// CreatedAt is set by Enqueue when zero.
	CreatedAt time.Time
}

// Validate reports whether ev can be enqueued; errors wrap ErrInvalidEvent.
func (ev Event) Validate() error {
	if ev.ID == "" {
		return fmt.Errorf("%w: id is required (it is the Nats-Msg-Id that makes a republish a duplicate)", ErrInvalidEvent)
	}
	if ev.Topic == "" {
		return fmt.Errorf("%w: event %s: topic is required", ErrInvalidEvent, ev.ID)
	}
	if err := platform.ValidateKey(ev.Key); err != nil {
		return fmt.Errorf("%w: event %s: %w", ErrInvalidEvent, ev.ID, err)
	}
	return nil
}

// Record is an enqueued event and its position in the outbox.
type Record struct {
	// Seq orders records: for one (topic, key), a higher Seq committed
	// later. Across keys Seq says nothing about commit order.
	Seq uint64
	Event
}

// Ack describes one acked publish of a record (Config.OnAck).
type Ack struct {
	// Duplicate: the stream had the event already (same Nats-Msg-Id).
	Duplicate bool
	// Latency is the time from the publish to its ack reaching the relay.
	Latency time.Duration
}
