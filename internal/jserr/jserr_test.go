package jserr_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/jserr"
)

// Every form of a compare-and-set conflict a real cluster returns is a
// WrongRevision, on a single replica (10071) and on a replicated bucket
// (10164) alike, and none of them is Transient.
func TestWrongRevisionOnRealBuckets(t *testing.T) {
	f := natstest.RunFabric(t, 3, natstest.WithSyncAlways(false))
	js := f.JetStream()
	ctx := natstest.Context(t, 60*time.Second)
	for _, replicas := range []int{1, 3} {
		kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: fmt.Sprintf("cas_r%d", replicas), Replicas: replicas})
		if err != nil {
			t.Fatal(err)
		}
		rev, err := kv.Create(ctx, "k", []byte("1"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Update(ctx, "k", []byte("2"), rev); err != nil {
			t.Fatal(err)
		}
		// rev is stale now: every conditional write at it is a conflict.
		_, createErr := kv.Create(ctx, "k", []byte("x"))
		_, updateErr := kv.Update(ctx, "k", []byte("x"), rev)
		deleteErr := kv.Delete(ctx, "k", jetstream.LastRevision(rev))
		_, pubErr := js.Publish(ctx, "$KV."+fmt.Sprintf("cas_r%d", replicas)+".k", []byte("x"), jetstream.WithExpectLastSequencePerSubject(rev))
		for name, err := range map[string]error{"create": createErr, "update": updateErr, "delete": deleteErr, "publish": pubErr} {
			if err == nil {
				t.Fatalf("R%d %s at a stale revision succeeded", replicas, name)
			}
			if !jserr.WrongRevision(err) {
				code, _ := jserr.Code(err)
				t.Errorf("R%d %s: WrongRevision(%v) = false (code %d)", replicas, name, err, code)
			}
			if jserr.Transient(err) {
				t.Errorf("R%d %s: Transient(%v) = true", replicas, name, err)
			}
		}
		// The key is as the one winning write left it.
		e, err := kv.Get(ctx, "k")
		if err != nil || string(e.Value()) != "2" {
			t.Fatalf("R%d: key after the conflicts: %v, %v; want 2", replicas, e, err)
		}
	}
}

// Contended compare-and-set on a replicated bucket: many writers update
// the same key at the same revision at once. Exactly one wins each round;
// every loser's error is a WrongRevision, whichever code the server chose
// (a conflict found while the proposals are applied comes as 10164).
func TestWrongRevisionUnderContention(t *testing.T) {
	f := natstest.RunFabric(t, 3, natstest.WithSyncAlways(false))
	ctx := natstest.Context(t, 60*time.Second)
	kv, err := f.JetStream().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "contended", Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	rev, err := kv.Create(ctx, "lease", []byte("0"))
	if err != nil {
		t.Fatal(err)
	}
	// Writers on connections to different nodes, so their proposals reach
	// the stream leader from several routes.
	const writers = 8
	kvs := make([]jetstream.KeyValue, writers)
	for i := range kvs {
		js := natstest.JetStream(t, f.NodeConn(i%3))
		if kvs[i], err = js.KeyValue(ctx, "contended"); err != nil {
			t.Fatal(err)
		}
	}
	codes := map[jetstream.ErrorCode]int{}
	for round := range 20 {
		errs := make(chan error, writers)
		start := make(chan struct{})
		for i := range writers {
			go func() {
				<-start
				_, err := kvs[i].Update(ctx, "lease", []byte(fmt.Sprint(round, i)), rev)
				errs <- err
			}()
		}
		close(start)
		won := 0
		for range writers {
			err := <-errs
			switch {
			case err == nil:
				won++
			case jserr.WrongRevision(err):
				code, _ := jserr.Code(err)
				codes[code]++
			default:
				t.Fatalf("round %d: a losing writer's error is not a WrongRevision: %v", round, err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d writers won a compare-and-set at revision %d, want 1", round, won, rev)
		}
		e, err := kv.Get(ctx, "lease")
		if err != nil {
			t.Fatal(err)
		}
		rev = e.Revision()
	}
	t.Logf("conflict codes seen: %v", codes)
}

func TestClassification(t *testing.T) {
	api := func(code jetstream.ErrorCode) error {
		return fmt.Errorf("wrapped: %w", &jetstream.APIError{Code: 400, ErrorCode: code})
	}
	for _, c := range []struct {
		name                string
		err                 error
		wrongRev, transient bool
	}{
		{"nil", nil, false, false},
		{"10071", api(jserr.CodeWrongLastSequence), true, false},
		{"10164", api(jserr.CodeWrongLastSequenceReplicated), true, false},
		{"key exists", jetstream.ErrKeyExists, true, false},
		{"revision mismatch", jetstream.ErrKeyRevisionMismatch, true, false},
		{"no responders", nats.ErrNoResponders, false, true},
		{"no stream response", jetstream.ErrNoStreamResponse, false, true},
		{"timeout", nats.ErrTimeout, false, true},
		{"deadline", context.DeadlineExceeded, false, true},
		{"reconnecting", nats.ErrConnectionReconnecting, false, true},
		{"no meta leader", api(10008), false, true},
		{"leader change", api(10009), false, true},
		{"no peers", api(jserr.CodeNoPeers), false, false},
		{"no account", api(jserr.CodeNoAccount), false, false},
		{"stream not found", api(10059), false, false},
		{"permission", errors.New("nats: permissions violation"), false, false},
	} {
		if got := jserr.WrongRevision(c.err); got != c.wrongRev {
			t.Errorf("%s: WrongRevision = %v, want %v", c.name, got, c.wrongRev)
		}
		if got := jserr.Transient(c.err); got != c.transient {
			t.Errorf("%s: Transient = %v, want %v", c.name, got, c.transient)
		}
	}
}
