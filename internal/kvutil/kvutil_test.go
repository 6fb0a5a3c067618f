package kvutil_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/kvutil"
)

// Lookup never creates; Open creates a missing bucket with its config and
// binds an existing one without changing its config; Keys lists in key
// order, by filter, an empty bucket as no keys.
func TestOpenLookupKeys(t *testing.T) {
	js := natstest.RunFabric(t, 1, natstest.WithSyncAlways(false)).JetStream()
	ctx := natstest.Context(t, 30*time.Second)

	kv, err := kvutil.Lookup(ctx, js, "b")
	if kv != nil || err != nil {
		t.Fatalf("Lookup of a missing bucket = %v, %v; want nil, nil", kv, err)
	}
	if _, err := js.KeyValue(ctx, "b"); err == nil {
		t.Fatal("Lookup created the bucket")
	}

	kv, err = kvutil.Open(ctx, js, jetstream.KeyValueConfig{Bucket: "b", History: 3})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := kv.Status(ctx); err != nil || st.History() != 3 {
		t.Fatalf("created bucket history = %v (%v), want 3", st.History(), err)
	}
	if keys, err := kvutil.Keys(ctx, kv, ">"); err != nil || len(keys) != 0 {
		t.Fatalf("Keys of an empty bucket = %v, %v; want none, nil", keys, err)
	}

	again, err := kvutil.Open(ctx, js, jetstream.KeyValueConfig{Bucket: "b", History: 7})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := again.Status(ctx); err != nil || st.History() != 3 {
		t.Fatalf("Open changed an existing bucket: history = %v (%v), want 3", st.History(), err)
	}
	if kv, err := kvutil.Lookup(ctx, js, "b"); kv == nil || err != nil {
		t.Fatalf("Lookup of an existing bucket = %v, %v", kv, err)
	}

	for _, k := range []string{"req.c", "req.a", "reset.b", "req.b"} {
		if _, err := kv.Put(ctx, k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := kv.Delete(ctx, "req.b"); err != nil {
		t.Fatal(err)
	}
	keys, err := kvutil.Keys(ctx, kv, "req.*")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"req.a", "req.c"}; !slices.Equal(keys, want) {
		t.Fatalf("Keys(req.*) = %v, want %v (sorted, deleted key left out)", keys, want)
	}
}

// lateLookup is a KeyValueManager whose first lookup misses, as one made
// just before another process created the bucket.
type lateLookup struct {
	jetstream.JetStream
	looked bool
}

func (l *lateLookup) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	if !l.looked {
		l.looked = true
		return nil, jetstream.ErrBucketNotFound
	}
	return l.JetStream.KeyValue(ctx, bucket)
}

// OpenKeep creates a missing bucket with its config, binds an existing one
// without changing its config (also one created by another process between
// its lookup and its create), and returns the create's error when no
// bucket results.
func TestOpenKeep(t *testing.T) {
	js := natstest.RunFabric(t, 1, natstest.WithSyncAlways(false)).JetStream()
	ctx := natstest.Context(t, 30*time.Second)
	history := func(kv jetstream.KeyValue) uint8 {
		t.Helper()
		st, err := kv.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return uint8(st.History())
	}

	kv, err := kvutil.OpenKeep(ctx, js, jetstream.KeyValueConfig{Bucket: "k", History: 3})
	if err != nil || history(kv) != 3 {
		t.Fatalf("OpenKeep of a missing bucket = %v, %v; want one created with history 3", kv, err)
	}
	kv, err = kvutil.OpenKeep(ctx, js, jetstream.KeyValueConfig{Bucket: "k", History: 7})
	if err != nil || history(kv) != 3 {
		t.Fatalf("OpenKeep of an existing bucket = %v, %v; want it bound with history 3 kept", kv, err)
	}
	kv, err = kvutil.OpenKeep(ctx, &lateLookup{JetStream: js}, jetstream.KeyValueConfig{Bucket: "k", History: 7})
	if err != nil || history(kv) != 3 {
		t.Fatalf("OpenKeep losing a create race = %v, %v; want the bucket bound with history 3 kept", kv, err)
	}

	if _, err := kvutil.OpenKeep(ctx, js, jetstream.KeyValueConfig{Bucket: "r3", Replicas: 3}); err == nil {
		t.Fatal("OpenKeep of a bucket JetStream cannot create returned no error")
	}
	if kv, err := kvutil.Lookup(ctx, js, "r3"); kv != nil || err != nil {
		t.Fatalf("after a refused create, Lookup = %v, %v; want no bucket", kv, err)
	}
}
