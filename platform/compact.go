package platform

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// Compacted topics (cleanup: compact).
//
// A compacted topic keeps the latest event per key: its stream has
// MaxMsgsPerSubject = 1 on the stored subject <topic>.<partition>.<key>, so
// storing an event removes the key's previous one at once. It is a
// current-state topic, NOT A FULL HISTORY: a replay from the start sees
// each live key's latest value only, and a reset to before a key's latest
// write cannot bring back its older values.
//
// A tombstone deletes a key: an event on the key with header
// Event-Tombstone: true and a Nats-TTL header (per-message TTL, stream
// AllowMsgTTL, nats-server 2.11+). Consumers see it like any event; the
// server removes it after the topic's tombstone retention, leaving the key
// with no event. A tombstone without Nats-TTL (e.g. from a plain NATS
// client) stays until the key is written again or retention removes it.
//
// Retention still applies (max_age drops a key whose latest event is
// older); with neither max_age nor max_bytes the size is bounded by the
// number of keys. Switching an existing topic between delete and compact
// is refused by catalog.Reconciler without
// catalog.ApplyOptions.AllowCleanupChange: delete -> compact deletes all
// but the latest event of every key immediately.

// TombstoneHeader marks an event that deletes its key on a compacted topic.
const TombstoneHeader = "Event-Tombstone"

// msgTTLHeader is nats-server's per-message TTL header.
const msgTTLHeader = "Nats-TTL"

// EffectiveTombstoneRetention is how long the compacted topic keeps a
// tombstone: TombstoneRetention, or DefaultTombstoneRetention when it is 0.
func (t TopicSpec) EffectiveTombstoneRetention() time.Duration {
	if t.TombstoneRetention > 0 {
		return t.TombstoneRetention
	}
	return DefaultTombstoneRetention
}

// TombstoneEvent returns the event that deletes key on the compacted topic
// t: no payload, header Event-Tombstone: true and Nats-TTL set to the
// topic's tombstone retention. Publish it with a Publisher like any event
// (id is its dedupe key). It refuses a topic that is not compacted: there
// a tombstone would be one more event, deleting nothing.
func TombstoneEvent(t TopicSpec, id, key string) (Event, error) {
	if !t.Compacted() {
		return Event{}, fmt.Errorf("%w: topic %q is not compacted (cleanup: %s); a tombstone would delete nothing", ErrInvalidEvent, t.Name, t.EffectiveCleanup())
	}
	h := nats.Header{}
	h.Set(TombstoneHeader, "true")
	h.Set(msgTTLHeader, fmt.Sprintf("%ds", int64(t.EffectiveTombstoneRetention().Round(time.Second)/time.Second)))
	return Event{ID: id, Topic: t.Name, Key: key, Headers: h}, nil
}

// IsTombstone reports whether headers mark a tombstone.
func IsTombstone(h nats.Header) bool {
	return h != nil && h.Get(TombstoneHeader) == "true"
}
