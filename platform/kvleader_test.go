package platform

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
)

// Two daemons open one bucket at start, concurrently. One opens it while
// direct gets are still on, the other switches them off before the first
// calls LeaderReads. The first must not keep its direct-get handle: the
// stream no longer answers direct gets, and every read would fail.
func TestLeaderReadsAfterAnotherSwitchedTheBucket(t *testing.T) {
	f := natstest.RunFabric(t, 1)
	ctx := natstest.Context(t, 30*time.Second)
	js := f.JetStream()
	cfg := jetstream.KeyValueConfig{Bucket: "leader-reads", History: 1, Storage: jetstream.FileStorage}
	created, err := js.CreateKeyValue(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := created.Put(ctx, "k", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	// The late daemon's handle, opened while AllowDirect is on.
	late, err := js.KeyValue(ctx, cfg.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	// The first daemon switches the bucket to leader reads.
	first, err := LeaderReads(ctx, js, created)
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, "KV_"+cfg.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	if s.CachedInfo().Config.AllowDirect {
		t.Fatal("LeaderReads left AllowDirect on")
	}
	late, err = LeaderReads(ctx, js, late)
	if err != nil {
		t.Fatal(err)
	}
	for name, kv := range map[string]jetstream.KeyValue{"switching handle": first, "late handle": late} {
		rctx := natstest.Context(t, 3*time.Second)
		e, err := kv.Get(rctx, "k")
		if err != nil {
			t.Fatalf("%s: read after the switch: %v", name, err)
		}
		if string(e.Value()) != "v1" {
			t.Fatalf("%s: read %q, want v1", name, e.Value())
		}
	}
}
