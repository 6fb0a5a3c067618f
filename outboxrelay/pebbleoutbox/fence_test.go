package pebbleoutbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/msgplatform/platform/outboxrelay"
	"github.com/msgplatform/platform/outboxrelay/pebbleoutbox"
)

// TestFenceSurvivesRestart: the fencing token is stored in the database.
// After the process (here: the DB and the Store) restarts, a relay still
// holding an older token can neither fence nor mark; the current token
// and newer ones still can. Two outboxes (prefixes) in one database keep
// separate tokens.
func TestFenceSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	open := func() (*pebble.DB, *pebbleoutbox.Store, *pebbleoutbox.Store) {
		db, err := pebble.Open(dir, &pebble.Options{Logger: quietLogger{}})
		if err != nil {
			t.Fatal(err)
		}
		a, err := pebbleoutbox.Open(db, pebbleoutbox.Options{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := pebbleoutbox.Open(db, pebbleoutbox.Options{Prefix: "second/"})
		if err != nil {
			t.Fatal(err)
		}
		return db, a, b
	}
	db, s, other := open()
	if err := s.Update(func(b *pebble.Batch) error {
		return s.Enqueue(b, outboxrelay.Event{ID: "e1", Topic: "orders", Key: "k"})
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Fence(ctx, 9); err != nil {
		t.Fatal(err)
	}
	if err := other.Fence(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db, s, other = open()
	defer db.Close()
	recs, err := s.Unsent(ctx, 10, nil)
	if err != nil || len(recs) != 1 {
		t.Fatalf("unsent after restart: %v, %v; want e1", recs, err)
	}
	if err := s.Fence(ctx, 5); !errors.Is(err, outboxrelay.ErrFenced) {
		t.Fatalf("Fence(5) after a restart with token 9 recorded: %v, want ErrFenced", err)
	}
	if err := s.MarkSent(ctx, 5, []uint64{recs[0].Seq}); !errors.Is(err, outboxrelay.ErrFenced) {
		t.Fatalf("MarkSent(5) after a restart with token 9 recorded: %v, want ErrFenced", err)
	}
	if recs, _ := s.Unsent(ctx, 10, nil); len(recs) != 1 {
		t.Fatalf("a refused mark marked something: unsent %v", recs)
	}
	if err := other.Fence(ctx, 3); err != nil {
		t.Fatalf("second outbox, token 3 > its own 2: %v", err)
	}
	if err := s.Fence(ctx, 9); err != nil {
		t.Fatalf("Fence with the recorded token: %v", err)
	}
	if err := s.MarkSent(ctx, 9, []uint64{recs[0].Seq}); err != nil {
		t.Fatalf("MarkSent with the recorded token: %v", err)
	}
	if recs, _ := s.Unsent(ctx, 10, nil); len(recs) != 0 {
		t.Fatalf("unsent after the mark: %v", recs)
	}
	if err := s.Fence(ctx, 12); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkSent(ctx, 9, []uint64{1}); !errors.Is(err, outboxrelay.ErrFenced) {
		t.Fatalf("MarkSent by the deposed token 9: %v, want ErrFenced", err)
	}
}
