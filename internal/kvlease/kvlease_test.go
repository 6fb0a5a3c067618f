package kvlease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/kvlease"
)

func bucket(t *testing.T) (*natstest.Fabric, jetstream.KeyValue) {
	t.Helper()
	f := natstest.RunFabric(t, 3, natstest.WithSyncAlways(false))
	ctx := natstest.Context(t, 30*time.Second)
	kv, err := f.JetStream().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "leases", Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	return f, kv
}

func named(name string) func() []byte { return func() []byte { return []byte(name) } }

// One holder at a time: a standby never acquires while the holder renews;
// when the holder stops (a crash), the standby takes over only after the
// old holder's token is no longer valid, with a higher token; the old
// holder's next renewal says it lost; a release hands over at once.
func TestOneHolderAndFencedTakeover(t *testing.T) {
	_, kv := bucket(t)
	ctx := context.Background()
	const ttl = 600 * time.Millisecond
	a := kvlease.New(kv, "relay", named("a"), kvlease.Config{TTL: ttl})
	b := kvlease.New(kv, "relay", named("b"), kvlease.Config{TTL: ttl})
	ta, err := a.Tick(ctx)
	if err != nil || ta == 0 {
		t.Fatalf("a acquires a free lease: token %d, %v", ta, err)
	}
	for range 12 { // 3 TTLs of a renewing every TTL/4
		if tb, _ := b.Tick(ctx); tb != 0 {
			t.Fatal("b acquired while a renews")
		}
		if tok, err := a.Tick(ctx); tok != ta || err != nil {
			t.Fatalf("a's renewal: token %d, %v; want %d", tok, err, ta)
		}
		time.Sleep(ttl / 4)
	}
	// a stops renewing. b takes over after a TTL; a's token is invalid by
	// then (Valid = TTL/2).
	start := time.Now()
	var tb uint64
	for tb == 0 {
		if time.Since(start) > 5*ttl {
			t.Fatal("b never took over")
		}
		tb, _ = b.Tick(ctx)
		if tb != 0 && a.Token() != 0 {
			t.Fatalf("b acquired (token %d) while a's token %d is still valid", tb, a.Token())
		}
		time.Sleep(ttl / 8)
	}
	if time.Since(start) < ttl || tb <= ta {
		t.Fatalf("takeover after %v (want >= %v), token %d (want > %d)", time.Since(start), ttl, tb, ta)
	}
	if tok, err := a.Tick(ctx); tok != 0 || !errors.Is(err, kvlease.ErrLost) {
		t.Fatalf("a's renewal after the takeover: token %d, %v; want 0, ErrLost", tok, err)
	}
	// After a release the standby needs no TTL: it acquires as soon as
	// the bucket's read shows the key gone (a direct get may be served by
	// a replica a moment behind the delete).
	b.Release(ctx)
	start = time.Now()
	for tok := uint64(0); tok == 0; {
		if time.Since(start) > ttl/2 {
			t.Fatalf("a did not acquire within %v of b's release", ttl/2)
		}
		var err error
		if tok, err = a.Tick(ctx); err != nil {
			t.Fatalf("a after b's release: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Many processes tick an absent lease at once on a replicated bucket
// (where contended conflicts come as 10164): exactly one holds it.
func TestContendedAcquisition(t *testing.T) {
	_, kv := bucket(t)
	ctx := context.Background()
	for round := range 10 {
		key := fmt.Sprintf("k%d", round)
		var wg sync.WaitGroup
		tokens := make([]uint64, 8)
		errs := make([]error, 8)
		start := make(chan struct{})
		for i := range tokens {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l := kvlease.New(kv, key, named(fmt.Sprint(i)), kvlease.Config{TTL: time.Second})
				<-start
				tokens[i], errs[i] = l.Tick(ctx)
			}()
		}
		close(start)
		wg.Wait()
		holders := 0
		for i, tok := range tokens {
			if errs[i] != nil {
				t.Fatalf("round %d: process %d: %v (a lost race is no error)", round, i, errs[i])
			}
			if tok != 0 {
				holders++
			}
		}
		if holders != 1 {
			t.Fatalf("round %d: %d holders, want 1", round, holders)
		}
	}
}

// A value the process recognises as its own (its write's answer was
// lost) is taken back at once, not after a TTL.
func TestOursIsTakenBackAtOnce(t *testing.T) {
	_, kv := bucket(t)
	ctx := context.Background()
	if _, err := kv.Put(ctx, "ingest", []byte("me")); err != nil {
		t.Fatal(err)
	}
	l := kvlease.New(kv, "ingest", named("me"), kvlease.Config{TTL: time.Hour, Ours: func(v []byte) bool { return string(v) == "me" }})
	if tok, err := l.Tick(ctx); tok == 0 || err != nil {
		t.Fatalf("own value: token %d, %v; want it at once", tok, err)
	}
	other := kvlease.New(kv, "other", named("me"), kvlease.Config{TTL: time.Hour, Ours: func(v []byte) bool { return string(v) == "me" }})
	if _, err := kv.Put(ctx, "other", []byte("someone")); err != nil {
		t.Fatal(err)
	}
	if tok, _ := other.Tick(ctx); tok != 0 {
		t.Fatal("took someone else's live lease")
	}
}

// Take acquires at once from a live holder (no TTL), with a higher
// token; the old holder's next renewal says it lost, and a standby still
// waits a whole TTL of the new holder's silence. On an absent key Take
// creates it.
func TestTakeFromALiveHolder(t *testing.T) {
	_, kv := bucket(t)
	ctx := context.Background()
	const ttl = 600 * time.Millisecond
	a := kvlease.New(kv, "run", named("a"), kvlease.Config{TTL: ttl})
	b := kvlease.New(kv, "run", named("b"), kvlease.Config{TTL: ttl})
	c := kvlease.New(kv, "run", named("c"), kvlease.Config{TTL: ttl})
	tb, err := b.Take(ctx)
	if err != nil || tb == 0 {
		t.Fatalf("b takes an absent lease: token %d, %v", tb, err)
	}
	ta, err := a.Tick(ctx)
	if err != nil || ta != 0 {
		t.Fatalf("a ticks b's live lease: token %d, %v; want 0", ta, err)
	}
	if tb, err = b.Tick(ctx); tb == 0 || err != nil {
		t.Fatalf("b's renewal: token %d, %v", tb, err)
	}
	start := time.Now()
	ta, err = a.Take(ctx)
	if err != nil || ta <= tb || a.Token() != ta {
		t.Fatalf("a takes from b: token %d (b's %d), Token %d, %v", ta, tb, a.Token(), err)
	}
	if d := time.Since(start); d > ttl/2 {
		t.Fatalf("Take waited %v", d)
	}
	if tok, err := b.Tick(ctx); tok != 0 || !errors.Is(err, kvlease.ErrLost) {
		t.Fatalf("b's renewal after a took over: token %d, %v; want 0, ErrLost", tok, err)
	}
	got, err := kv.Get(ctx, "run")
	if err != nil || string(got.Value()) != "a" {
		t.Fatalf("key holds %q (%v), want a", got.Value(), err)
	}
	// a renews; c, a standby, never acquires.
	for range 8 {
		if tok, _ := c.Tick(ctx); tok != 0 {
			t.Fatal("c acquired while a renews")
		}
		if tok, err := a.Tick(ctx); tok != ta || err != nil {
			t.Fatalf("a's renewal: token %d, %v; want %d", tok, err, ta)
		}
		time.Sleep(ttl / 4)
	}
}

// A renewal whose answer was lost but that landed (a timeout while a node
// failed) leaves the holder's known revision behind the key's. The next
// renewal's compare-and-set fails, yet the key's latest write is the
// holder's own: the holder keeps the lease and its token. Had another
// process written since, the renewal says lost.
func TestRenewalThatLandedUnheardKeepsTheLease(t *testing.T) {
	_, kv := bucket(t)
	ctx := context.Background()
	a := kvlease.New(kv, "relay", named("a"), kvlease.Config{TTL: 2 * time.Second})
	ta, err := a.Tick(ctx)
	if err != nil || ta == 0 {
		t.Fatalf("a acquires: token %d, %v", ta, err)
	}
	e, err := kv.Get(ctx, "relay")
	if err != nil {
		t.Fatal(err)
	}
	// a's renewal, landed, its answer lost.
	if _, err := kv.Update(ctx, "relay", []byte("a"), e.Revision()); err != nil {
		t.Fatal(err)
	}
	if tok, err := a.Tick(ctx); tok != ta || err != nil {
		t.Fatalf("renewal after one that landed unheard: token %d, %v; want %d, nil", tok, err, ta)
	}
	// Another process writes: a has lost.
	e, err = kv.Get(ctx, "relay")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Update(ctx, "relay", []byte("b"), e.Revision()); err != nil {
		t.Fatal(err)
	}
	if tok, err := a.Tick(ctx); tok != 0 || !errors.Is(err, kvlease.ErrLost) {
		t.Fatalf("renewal after another holder wrote: token %d, %v; want 0, ErrLost", tok, err)
	}
}
