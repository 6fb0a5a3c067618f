package embeddednats_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/msgplatform/platform/embeddednats/natstest"
)

// TestRegionsLinkDeny: two regions, each its own domain, linked; a subject
// crosses until it is put on the link's deny list at run time, and each
// region keeps accepting JetStream writes with the other gone.
func TestRegionsLinkDeny(t *testing.T) {
	rr := natstest.RunRegions(t, 1, nil, "eu", "us")
	eu, us := rr.Conn("eu"), rr.Conn("us")
	var got atomic.Int64
	if _, err := us.Subscribe("a.>", func(*nats.Msg) { got.Add(1) }); err != nil {
		t.Fatal(err)
	}
	_ = us.Flush()
	natstest.WaitFor(t, 10*time.Second, func() error {
		_ = eu.Publish("a.x", nil)
		_ = eu.Flush()
		if got.Load() == 0 {
			return errNotYet
		}
		return nil
	})
	ctx := t.Context()
	resolvers := map[string]server.AccountResolver{}
	for _, r := range []string{"eu", "us"} {
		for _, n := range rr.Region(r).Nodes() {
			resolvers[n.Name()] = n.Server().AccountResolver()
		}
	}
	if err := rr.SetDeny(ctx, []string{"a.>"}); err != nil {
		t.Fatal(err)
	}
	// The reload keeps each server's running account resolver (a new,
	// never started one would neither fetch from peers nor share the
	// running one's store).
	for _, r := range []string{"eu", "us"} {
		for _, n := range rr.Region(r).Nodes() {
			if got := n.Server().AccountResolver(); got != resolvers[n.Name()] {
				t.Errorf("%s: the link deny reload replaced the running account resolver (%p) with %p", n.Name(), resolvers[n.Name()], got)
			}
		}
	}
	time.Sleep(500 * time.Millisecond)
	before := got.Load()
	for range 20 {
		_ = eu.Publish("a.x", nil)
	}
	_ = eu.Flush()
	time.Sleep(500 * time.Millisecond)
	if n := got.Load() - before; n != 0 {
		t.Errorf("%d messages crossed a denied subject", n)
	}
	for _, n := range rr.Region("us").Nodes() {
		if n.Linked() == 0 {
			t.Errorf("%s lost its link after the deny list changed", n.Name())
		}
	}

	// The other region gone: each keeps its own meta group and accepts
	// stream creates and writes.
	rr.Kill("eu")
	js := rr.JetStream("us")
	if _, err := js.CreateStream(ctx, jsStream("alone")); err != nil {
		t.Fatalf("us cannot create a stream with eu down: %v", err)
	}
	if _, err := js.Publish(ctx, "alone.1", []byte("x")); err != nil {
		t.Fatalf("us cannot write with eu down: %v", err)
	}
}
