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
// current-state topic (customer profiles, prices), NOT A FULL HISTORY: a
// group that replays it from the start sees each live key's latest value,
// never the changes in between, and a reset to a time before the latest
// write of a key cannot bring back the older values.
//
// A tombstone deletes a key: an event on the key with header
// Event-Tombstone: true and a Nats-TTL header (per-message TTL, stream
// AllowMsgTTL, nats-server 2.11+). It replaces the key's value like any
// event, so consumers see the delete, and the server removes the
// tombstone itself after the topic's tombstone retention; after that the
// key has no event at all. A tombstone published without Nats-TTL (e.g. by
// a plain NATS client) stays until the key is written again or the topic's
// retention removes it.
//
// Retention still applies: a compacted topic with max_age drops a key
// whose latest event is older than max_age. With neither max_age nor
// max_bytes its size is bounded by its number of keys.
//
// Switching an existing topic between delete and compact is refused by
// Apply unless ApplyOptions.AllowCleanupChange: delete -> compact deletes
// all but the latest event of every key immediately.

// TombstoneHeader marks an event that deletes its key on a compacted topic.
const TombstoneHeader = "Event-Tombstone"

// msgTTLHeader is nats-server's per-message TTL header.
const msgTTLHeader = "Nats-TTL"

func (t TopicSpec) tombstoneRetention() time.Duration {
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
		return Event{}, fmt.Errorf("%w: topic %q is not compacted (cleanup: %s); a tombstone would delete nothing", ErrInvalidEvent, t.Name, cleanupOf(t))
	}
	h := nats.Header{}
	h.Set(TombstoneHeader, "true")
	h.Set(msgTTLHeader, fmt.Sprintf("%ds", int64(t.tombstoneRetention().Round(time.Second)/time.Second)))
	return Event{ID: id, Topic: t.Name, Key: key, Headers: h}, nil
}

// IsTombstone reports whether headers mark a tombstone.
func IsTombstone(h nats.Header) bool {
	return h != nil && h.Get(TombstoneHeader) == "true"
}
