package platform

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/kvutil"
)

// WorkerSessionsBucket is the replicated KV bucket where the Workers of
// every queue keep their sessions: key <queue stream>.<workers id>, value
// the ack subjects of the jobs they hold, written every SessionHeartbeat
// and whenever they claim a job.
//
// Why: NATS has no notion of a pull consumer's connection owning its
// deliveries, so a job whose worker lost its connection stays with that
// worker until the lease (the consumer's AckWait, default 60 s) lapses.
// Shortening the lease itself would give a job away whenever a live
// worker stalls for a moment (GC, a busy CPU), so the lease is left as
// declared and the workers supervise each other instead: a session whose
// record was not renewed for SessionTTL (measured on the broker's clock:
// against the newest record of the queue, so no clock skew) belongs to a
// worker that crashed or lost its connection. The first live peer to
// delete the record (compare-and-set on its revision, so exactly one)
// sends -NAK to each job's ack subject: the broker redelivers the jobs at
// once, to a live worker, about SessionTTL after the loss instead of a
// whole lease. A worker that comes back after that (a partition, not a
// crash) may still finish and ack its job; the ack applies to the stream
// sequence, so the job is done once or redone (at-least-once, as with a
// lapsed lease). With no live peer, or once a session has been silent
// for half a lease (the job may then be with another worker, and a NAK
// names a stream sequence, not a delivery), the lease is the fallback;
// so the early return needs SessionTTL well below half the lease.
const WorkerSessionsBucket = "platform_worker_sessions"

// DefaultSessionTTL is how long a session may go unrenewed before its
// Workers instance is taken for lost.
const DefaultSessionTTL = 5 * time.Second

// SessionRecord is what a Workers instance records about itself.
type SessionRecord struct {
	Jobs []string `json:"jobs"` // ack (reply) subjects of held jobs
	// TTL is the instance's SessionTTL (queue describe calls a session
	// silent for longer lost).
	TTL time.Duration `json:"ttl,omitempty"`
}

// ReadSessionRecords reads the session records under prefix (<stream>.) and
// the time of the newest.
func ReadSessionRecords(ctx context.Context, kv jetstream.KeyValue, prefix string) ([]jetstream.KeyValueEntry, time.Time, error) {
	keys, err := kvutil.Keys(ctx, kv, prefix+"*")
	if err != nil {
		return nil, time.Time{}, err
	}
	var entries []jetstream.KeyValueEntry
	var newest time.Time
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue
		}
		entries = append(entries, e)
		if e.Created().After(newest) {
			newest = e.Created()
		}
	}
	return entries, newest, nil
}

// WorkerSession is a Workers instance of a queue as its session record
// shows it (queue describe).
type WorkerSession struct {
	ID string `json:"id"`
	// Jobs is how many jobs it held at its last renewal.
	Jobs int `json:"jobs"`
	// Silent is how long ago it last renewed its session.
	Silent time.Duration `json:"silent"`
	// Lost: silent for longer than its SessionTTL (crashed, or cut off
	// from the cluster); a live peer gives its jobs back and removes the
	// record, or, with none, the lease gives the jobs back.
	Lost bool `json:"lost"`
}
