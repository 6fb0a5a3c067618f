package pgoutbox

import (
	"context"
	"errors"
	"io/fs"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/msgplatform/platform/internal/pgmigrate"
	"github.com/msgplatform/platform/internal/pgtest"
	"github.com/msgplatform/platform/outboxrelay"
)

// TestMigrationFrom0001: an outbox written by the 0001 layout (events
// marked sent through sent_at, a relay's token in lease) is upgraded by
// Migrate: the events that were unsent are returned by Unsent in seq
// order, the ones already sent are not, the recorded token still fences
// older relays, a relay of the old layout is locked out (its Fence
// statement is refused), and pruning removes the old sent rows by their
// sent_at as well as the new ones.
func TestMigrationFrom0001(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	first, err := fs.ReadFile(migrations, "migrations/0001_outbox.sql")
	if err != nil {
		t.Fatal(err)
	}
	only0001 := fstest.MapFS{"migrations/0001_outbox.sql": {Data: first}}
	if err := pgmigrate.Apply(ctx, pool, DefaultSchema, migrationLock, only0001, "migrations"); err != nil {
		t.Fatal(err)
	}
	// The old layout: 6 events, the first 3 sent an hour ago, token 7.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
			if err := Enqueue(ctx, tx, outboxrelay.Event{ID: id, Topic: "orders", Key: "k" + id, Payload: []byte(id)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE outboxrelay.events SET sent_at = now() - interval '1 hour' WHERE event_id IN ('a', 'b', 'c')`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO outboxrelay.lease (outbox, token) VALUES ('default', 7)`); err != nil {
		t.Fatal(err)
	}

	if err := Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	s := New(pool)
	recs, err := s.Unsent(ctx, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := recIDs(recs); got != "d,e,f" {
		t.Fatalf("unsent after migration: %s, want d,e,f", got)
	}
	st, err := s.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Unsent != 3 || st.OldestUnsent.IsZero() {
		t.Fatalf("stats after migration: %+v, want 3 unsent and an oldest time", st)
	}
	// The token recorded before the migration still fences older relays.
	if err := s.Fence(ctx, 6); !errors.Is(err, outboxrelay.ErrFenced) {
		t.Fatalf("fence with token 6 < recorded 7: %v, want ErrFenced", err)
	}
	// A relay of the old layout cannot take the outbox over: its Fence
	// statement (verbatim from 0001-era code) records nothing.
	var got int64
	err = pool.QueryRow(ctx, `INSERT INTO outboxrelay.lease AS l (outbox, token) VALUES ($1, $2)
ON CONFLICT (outbox) DO UPDATE SET token = EXCLUDED.token WHERE l.token <= EXCLUDED.token
RETURNING token`, "default", int64(1<<40)).Scan(&got)
	if !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("old-layout fence: token %d, err %v; want no row (locked out)", got, err)
	}
	if err := s.Fence(ctx, 8); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkSent(ctx, 8, []uint64{recs[0].Seq}); err != nil {
		t.Fatal(err)
	}
	// Pruning: everything sent before the cut-off, old layout and new.
	n, err := s.Prune(ctx, time.Now().Add(time.Minute), 2)
	if err != nil || n != 2 {
		t.Fatalf("prune batch 1: %d, %v; want 2", n, err)
	}
	n, err = s.Prune(ctx, time.Now().Add(time.Minute), 10)
	if err != nil || n != 2 {
		t.Fatalf("prune batch 2: %d, %v; want the remaining 2", n, err)
	}
	var left []string
	rows, err := pool.Query(ctx, `SELECT event_id FROM outboxrelay.events ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	left, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 2 || left[0] != "e" || left[1] != "f" {
		t.Fatalf("events left after prune: %v, want [e f]", left)
	}
}

func recIDs(recs []outboxrelay.Record) string {
	s := ""
	for i, r := range recs {
		if i > 0 {
			s += ","
		}
		s += r.ID
	}
	return s
}
