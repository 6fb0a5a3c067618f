package dlq

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/kvutil"
)

// FirstFailuresBucket is the replicated KV bucket recording when each
// failing event first failed, key <stream>.<consumer>.<seq>, value the
// time (RFC 3339, the consumer's clock). The broker counts attempts
// (NumDelivered) but keeps no time of the first one, and the stored event
// cannot carry a header added on retry (a NAK redelivers it unchanged), so
// without this record a consumer process restarted between attempts, or
// a member taking over the partition, would write the DLQ entry's first
// failure as its own last one. The consumer runtime creates the record
// (compare-and-set: the first writer wins) when an event's first failure
// is retried, just after its NAK (so the backoff is not held up; a crash
// within that moment loses the record), reads it on the failures after,
// and deletes it when the event is acknowledged or dead-lettered; the
// bucket's TTL bounds what a crash leaves behind. The Router reads it
// too. If the bucket cannot be reached the runtime keeps the time in
// memory only (a restart then loses it).
const FirstFailuresBucket = "platform_first_failures"

// firstFailuresMaxAge bounds a record's life: far beyond any retry
// schedule (HarborCart: 2+4+8+16 s).
const firstFailuresMaxAge = 7 * 24 * time.Hour

// FirstFailures is a view of FirstFailuresBucket. It binds the bucket on
// first use and creates it only when a failure must be recorded, so a
// consumer that never fails makes no call for it. Its methods are safe
// for concurrent use; on a nil *FirstFailures they record nothing and
// find nothing.
type FirstFailures struct {
	js       jetstream.JetStream
	replicas int

	mu sync.Mutex
	kv jetstream.KeyValue
}

// NewFirstFailures returns a view of the bucket in js's account, created
// (if it must be) with replicas clamped to [1, 3].
func NewFirstFailures(js jetstream.JetStream, replicas int) *FirstFailures {
	return &FirstFailures{js: js, replicas: min(max(replicas, 1), 3)}
}

// bucket binds (or, with create, creates) the bucket; nil if it cannot.
func (f *FirstFailures) bucket(ctx context.Context, create bool) jetstream.KeyValue {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.kv != nil {
		return f.kv
	}
	var kv jetstream.KeyValue
	var err error
	if create {
		kv, err = kvutil.OpenKeep(ctx, f.js, jetstream.KeyValueConfig{
			Bucket: FirstFailuresBucket, Description: "platform first failure time of failing events", History: 1,
			TTL: firstFailuresMaxAge, Replicas: f.replicas, Storage: jetstream.FileStorage,
		})
	} else {
		kv, err = f.js.KeyValue(ctx, FirstFailuresBucket)
	}
	if err != nil {
		return nil
	}
	f.kv = kv
	return kv
}

func failureKey(stream, consumer string, seq uint64) string {
	return stream + "." + consumer + "." + strconv.FormatUint(seq, 10)
}

// Record records now as the first failure of the event unless one is
// recorded already, and returns the recorded time (now if the bucket
// cannot be reached).
func (f *FirstFailures) Record(ctx context.Context, stream, consumer string, seq uint64, now time.Time) time.Time {
	if f == nil {
		return now
	}
	kv := f.bucket(ctx, true)
	if kv == nil {
		return now
	}
	key := failureKey(stream, consumer, seq)
	_, err := kv.Create(ctx, key, []byte(now.UTC().Format(time.RFC3339Nano)))
	if err == nil || !errors.Is(err, jetstream.ErrKeyExists) {
		return now
	}
	if t, ok := lookupFailure(ctx, kv, key); ok {
		return t
	}
	return now
}

// Recorded returns the recorded first failure of the event, if any.
func (f *FirstFailures) Recorded(ctx context.Context, stream, consumer string, seq uint64) (time.Time, bool) {
	if f == nil {
		return time.Time{}, false
	}
	kv := f.bucket(ctx, false)
	if kv == nil {
		return time.Time{}, false
	}
	return lookupFailure(ctx, kv, failureKey(stream, consumer, seq))
}

func lookupFailure(ctx context.Context, kv jetstream.KeyValue, key string) (time.Time, bool) {
	e, err := kv.Get(ctx, key)
	if err != nil {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, string(e.Value()))
	return t, err == nil
}

// Forget deletes the event's record (best effort: the bucket's TTL
// removes what is left).
func (f *FirstFailures) Forget(ctx context.Context, stream, consumer string, seq uint64) {
	if f == nil {
		return
	}
	if kv := f.bucket(ctx, false); kv != nil {
		_ = kv.Purge(ctx, failureKey(stream, consumer, seq))
	}
}
