package pebbleinbox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/inbox/pebbleinbox"
)

type msg struct {
	id    string
	acked int
}

func (m *msg) Headers() nats.Header { return nats.Header{jetstream.MsgIDHeader: []string{m.id}} }
func (m *msg) Ack() error           { m.acked++; return nil }

type quiet struct{}

func (quiet) Infof(string, ...any)      {}
func (quiet) Errorf(string, ...any)     {}
func (quiet) Fatalf(f string, a ...any) { panic(fmt.Sprintf(f, a...)) }

func newInbox(t *testing.T, cfg platform.InboxConfig) (*pebble.DB, *pebbleinbox.Inbox) {
	t.Helper()
	db, err := pebble.Open(t.TempDir(), &pebble.Options{Logger: quiet{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	in, err := pebbleinbox.New(db, cfg, pebbleinbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return db, in
}

func effects(t *testing.T, db *pebble.DB) []string {
	t.Helper()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte("fx/"), UpperBound: []byte("fx0")})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	var out []string
	for ok := it.First(); ok; ok = it.Next() {
		out = append(out, string(it.Key()[3:]))
	}
	return out
}

func seen(t *testing.T, in *pebbleinbox.Inbox, id string) bool {
	t.Helper()
	ok, err := in.Seen(id)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

var errBoom = errors.New("boom")

func TestProcessOnceAndFailedEffectLeavesNoRow(t *testing.T) {
	db, in := newInbox(t, platform.DefaultInboxConfig("c1"))
	ctx := context.Background()
	write := func(id string) func(*pebble.Batch) error {
		return func(b *pebble.Batch) error { return b.Set([]byte("fx/"+id), nil, nil) }
	}
	m := &msg{id: "e1"}
	if out, err := in.Process(ctx, m, write("e1")); err != nil || out != platform.InboxProcessed || m.acked != 1 {
		t.Fatalf("first: %v %v acked %d", out, err, m.acked)
	}
	if out, err := in.Process(ctx, m, write("e1")); err != nil || out != platform.InboxDuplicate || m.acked != 2 {
		t.Fatalf("repeat: %v %v acked %d", out, err, m.acked)
	}
	f := &msg{id: "e2"}
	_, err := in.Process(ctx, f, func(b *pebble.Batch) error {
		if err := write("e2")(b); err != nil {
			return err
		}
		return errBoom
	})
	if !errors.Is(err, errBoom) || f.acked != 0 {
		t.Fatalf("failed effect: %v, acked %d", err, f.acked)
	}
	if seen(t, in, "e2") || fmt.Sprint(effects(t, db)) != "[e1]" {
		t.Fatalf("after a failed effect: seen %v, effects %v; want no row and only e1", seen(t, in, "e2"), effects(t, db))
	}
}

func TestProcessBatch(t *testing.T) {
	db, in := newInbox(t, platform.DefaultInboxConfig("c1"))
	ctx := context.Background()
	if _, err := in.Process(ctx, &msg{id: "old"}, func(*pebble.Batch) error { return nil }); err != nil {
		t.Fatal(err)
	}
	msgs := []*msg{{id: "a"}, {id: "bad"}, {id: "a"}, {id: "old"}, {id: "c"}}
	ims := make([]platform.InboxMsg, len(msgs))
	for i, m := range msgs {
		ims[i] = m
	}
	outs, errs, err := in.ProcessBatch(ctx, ims, func(b *pebble.Batch, m platform.InboxMsg) error {
		id, _ := platform.EventIDOf(m)
		if err := b.Set([]byte("fx/"+id), nil, nil); err != nil {
			return err
		}
		if id == "bad" {
			return errBoom
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []platform.InboxOutcome{platform.InboxProcessed, 0, platform.InboxDuplicate, platform.InboxDuplicate, platform.InboxProcessed}
	for i := range msgs {
		if outs[i] != want[i] {
			t.Errorf("msg %d (%s): %v, want %v", i, msgs[i].id, outs[i], want[i])
		}
	}
	if !errors.Is(errs[1], errBoom) || msgs[1].acked != 0 || seen(t, in, "bad") {
		t.Errorf("failed message: err %v, acked %d, row %v", errs[1], msgs[1].acked, seen(t, in, "bad"))
	}
	if got := fmt.Sprint(effects(t, db)); got != "[a c]" {
		t.Errorf("effects %s, want [a c]", got)
	}
}

func TestIfNewer(t *testing.T) {
	db, in := newInbox(t, platform.DefaultInboxConfig("c1"))
	for _, step := range []struct {
		version uint64
		want    bool
	}{{5, true}, {3, false}, {5, false}, {6, true}} {
		b := db.NewBatch()
		got, err := in.IfNewer(b, "order:1", step.version)
		if err == nil {
			err = b.Commit(pebble.Sync)
		}
		b.Close()
		if err != nil || got != step.want {
			t.Errorf("IfNewer(%d) = %v, %v; want %v", step.version, got, err, step.want)
		}
	}
}

func TestPruneInBatches(t *testing.T) {
	cfg := platform.DefaultInboxConfig("c1")
	cfg.PruneBatch = 3
	_, in := newInbox(t, cfg)
	ctx := context.Background()
	process := func(ids ...string) {
		for _, id := range ids {
			if _, err := in.Process(ctx, &msg{id: id}, func(*pebble.Batch) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
	}
	process("o1", "o2", "o3", "o4", "o5", "o6", "o7")
	time.Sleep(2 * time.Millisecond)
	cut := time.Now()
	time.Sleep(2 * time.Millisecond)
	process("n1", "n2")
	n, err := in.PruneBefore(ctx, cut)
	if err != nil || n != 7 {
		t.Fatalf("prune: %d, %v; want 7 (in batches of 3)", n, err)
	}
	if seen(t, in, "o7") || !seen(t, in, "n1") || !seen(t, in, "n2") {
		t.Errorf("after prune: o7 %v n1 %v n2 %v", seen(t, in, "o7"), seen(t, in, "n1"), seen(t, in, "n2"))
	}
	if n, err := in.Prune(ctx); err != nil || n != 0 {
		t.Errorf("prune at the retention: %d, %v; want 0 (all are recent)", n, err)
	}
}
