package pgoutbox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/msgplatform/platform/internal/pgtest"
	"github.com/msgplatform/platform/outboxrelay"
	"github.com/msgplatform/platform/outboxrelay/pgoutbox"
)

func newStore(t *testing.T) (*pgxpool.Pool, *pgoutbox.Store) {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if err := pgoutbox.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if err := pgoutbox.Migrate(ctx, pool); err != nil {
		t.Fatalf("second Migrate (must be idempotent): %v", err)
	}
	return pool, pgoutbox.New(pool)
}

// TestConcurrentTransactionsOneKey: transaction A enqueues key k and stays
// open; transaction B enqueueing k waits for A (the per-key advisory
// lock), so nothing of k is visible while A is open and B's event gets a
// higher seq than A's: per key, seq order is commit order. A transaction
// on another key is not held up.
func TestConcurrentTransactionsOneKey(t *testing.T) {
	pool, store := newStore(t)
	ctx := context.Background()
	ev := func(id, key string) outboxrelay.Event {
		return outboxrelay.Event{ID: id, Topic: "orders", Key: key, Payload: []byte(id)}
	}
	txA, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txA.Rollback(ctx)
	if err := pgoutbox.Enqueue(ctx, txA, ev("a", "k")); err != nil {
		t.Fatal(err)
	}
	bDone := make(chan error, 1)
	go func() {
		bDone <- pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return pgoutbox.Enqueue(ctx, tx, ev("b", "k")) })
	}()
	// Another key goes through while A is open.
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return pgoutbox.Enqueue(ctx, tx, ev("c", "other")) }); err != nil {
		t.Fatalf("other key: %v", err)
	}
	select {
	case err := <-bDone:
		t.Fatalf("B committed while A (same key) was open: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	recs, err := store.Unsent(ctx, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].ID != "c" {
		t.Fatalf("visible while A is open: %+v, want only c", recs)
	}
	if err := txA.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-bDone; err != nil {
		t.Fatalf("B: %v", err)
	}
	recs, err = store.Unsent(ctx, 10, nil)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	var seqA, seqB uint64
	for _, r := range recs {
		if r.Key == "k" {
			order = append(order, r.ID)
		}
		switch r.ID {
		case "a":
			seqA = r.Seq
		case "b":
			seqB = r.Seq
		}
	}
	if len(order) != 2 || order[0] != "a" || order[1] != "b" || seqA >= seqB {
		t.Fatalf("key k: %v (seq a %d, b %d), want a then b in seq order", order, seqA, seqB)
	}
}

// TestDeletedEventsLeaveTheQueue: events deleted by hand (or truncated)
// leave the relay's queue with them, so a run of deleted events never
// hides the ones behind it from Unsent's window, and Stats counts only
// events that exist.
func TestDeletedEventsLeaveTheQueue(t *testing.T) {
	pool, store := newStore(t)
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for i := range 6 {
			if err := pgoutbox.Enqueue(ctx, tx, outboxrelay.Event{ID: fmt.Sprint("e", i), Topic: "orders", Key: "k"}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM outboxrelay.events WHERE event_id IN ('e0', 'e1', 'e2')`); err != nil {
		t.Fatal(err)
	}
	recs, err := store.Unsent(ctx, 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || recs[0].ID != "e3" || recs[2].ID != "e5" {
		t.Fatalf("Unsent(3) after deleting e0-e2: %v, want e3, e4, e5", recs)
	}
	if st, err := store.Stats(ctx); err != nil || st.Unsent != 3 {
		t.Fatalf("Stats after deleting e0-e2: %+v, %v; want 3 unsent", st, err)
	}
	if _, err := pool.Exec(ctx, `TRUNCATE outboxrelay.events`); err != nil {
		t.Fatal(err)
	}
	if st, err := store.Stats(ctx); err != nil || st.Unsent != 0 {
		t.Fatalf("Stats after TRUNCATE: %+v, %v; want none", st, err)
	}
}

// TestMarkLogsOneRowPerBatch: MarkSent writes one sent_batches row per
// call, whatever its size; Prune deletes the events of the oldest rows
// first, trimming a row it reaches with more seqs than the batch has
// room for, then the entries of sent a relay of the previous version
// wrote (one row per event), so a rolling upgrade leaves nothing behind.
func TestMarkLogsOneRowPerBatch(t *testing.T) {
	pool, store := newStore(t)
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for i := range 8 {
			if err := pgoutbox.Enqueue(ctx, tx, outboxrelay.Event{ID: fmt.Sprint("e", i), Topic: "orders", Key: fmt.Sprint("k", i%3)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	recs, err := store.Unsent(ctx, 10, nil)
	if err != nil || len(recs) != 8 {
		t.Fatalf("Unsent: %d records, %v; want 8", len(recs), err)
	}
	if err := store.Fence(ctx, 1); err != nil {
		t.Fatal(err)
	}
	// e6, e7: marked by a relay of the previous version, one sent row each.
	if _, err := pool.Exec(ctx, `WITH d AS (DELETE FROM outboxrelay.unsent WHERE seq = ANY($1) RETURNING seq)
INSERT INTO outboxrelay.sent (seq, sent_at) SELECT seq, now() - interval '1 hour' FROM d`, []int64{int64(recs[6].Seq), int64(recs[7].Seq)}); err != nil {
		t.Fatal(err)
	}
	seqs := func(rs []outboxrelay.Record) []uint64 {
		out := make([]uint64, len(rs))
		for i, r := range rs {
			out[i] = r.Seq
		}
		return out
	}
	if err := store.MarkSent(ctx, 1, seqs(recs[:4])); err != nil {
		t.Fatal(err)
	}
	if err := store.MarkSent(ctx, 1, seqs(recs[4:6])); err != nil {
		t.Fatal(err)
	}
	// A repeated mark (all already sent) logs nothing.
	if err := store.MarkSent(ctx, 1, seqs(recs[:2])); err != nil {
		t.Fatal(err)
	}
	var rows, logged int
	if err := pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(cardinality(seqs)), 0) FROM outboxrelay.sent_batches`).Scan(&rows, &logged); err != nil {
		t.Fatal(err)
	}
	if rows != 2 || logged != 6 {
		t.Fatalf("sent_batches: %d rows logging %d seqs, want 2 rows logging 6", rows, logged)
	}
	left := func() []string {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT event_id FROM outboxrelay.events ORDER BY seq`)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	cutoff := time.Now().Add(time.Minute)
	var got []string
	for _, limit := range []int{3, 3, 3} {
		n, err := store.Prune(ctx, cutoff, limit)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%d:%v", n, left()))
	}
	want := []string{"3:[e3 e4 e5 e6 e7]", "3:[e6 e7]", "2:[]"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Prune(3) three times: %v, want %v", got, want)
	}
}

// TestEnqueueSQL: an event enqueued through a database/sql transaction (the
// pgx stdlib driver) is in the outbox once the transaction commits; an
// invalid one is refused with ErrInvalidEvent and nothing is written.
func TestEnqueueSQL(t *testing.T) {
	pool, store := newStore(t)
	ctx := context.Background()
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if err := pgoutbox.EnqueueSQL(ctx, tx, outboxrelay.Event{ID: "bad", Key: "k"}); !errors.Is(err, outboxrelay.ErrInvalidEvent) {
		t.Fatalf("EnqueueSQL without a topic: %v, want ErrInvalidEvent", err)
	}
	if err := pgoutbox.EnqueueSQL(ctx, tx, outboxrelay.Event{ID: "e1", Topic: "orders", Key: "k", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	recs, err := store.Unsent(ctx, 10, nil)
	if err != nil || len(recs) != 1 || recs[0].ID != "e1" || string(recs[0].Payload) != "x" {
		t.Fatalf("Unsent after EnqueueSQL: %+v, %v; want e1 alone", recs, err)
	}
}
