package pginbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/pgtest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/inbox/pginbox"
)

type msg struct {
	id    string
	acked int
}

func (m *msg) Headers() nats.Header { return nats.Header{jetstream.MsgIDHeader: []string{m.id}} }
func (m *msg) Ack() error           { m.acked++; return nil }

func newInbox(t *testing.T, cfg platform.InboxConfig) (*pgxpool.Pool, *pginbox.Inbox) {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := pginbox.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE effects (event_id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	in, err := pginbox.New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return pool, in
}

func effects(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM effects`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func seen(t *testing.T, in *pginbox.Inbox, id string) bool {
	t.Helper()
	ok, err := in.Seen(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

var errBoom = errors.New("boom")

func TestProcessOnceAndFailedEffectLeavesNoRow(t *testing.T) {
	pool, in := newInbox(t, platform.DefaultInboxConfig("c1"))
	ctx := context.Background()
	write := func(id string) func(pgx.Tx) error {
		return func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `INSERT INTO effects VALUES ($1)`, id)
			return err
		}
	}
	m := &msg{id: "e1"}
	if out, err := in.Process(ctx, m, write("e1")); err != nil || out != platform.InboxProcessed || m.acked != 1 {
		t.Fatalf("first: %v %v acked %d", out, err, m.acked)
	}
	if out, err := in.Process(ctx, m, write("e1")); err != nil || out != platform.InboxDuplicate || m.acked != 2 {
		t.Fatalf("repeat: %v %v acked %d", out, err, m.acked)
	}
	// The effect writes, then fails: neither its write nor the row stays,
	// and the message is not acked.
	f := &msg{id: "e2"}
	_, err := in.Process(ctx, f, func(tx pgx.Tx) error {
		if err := write("e2")(tx); err != nil {
			return err
		}
		return errBoom
	})
	if !errors.Is(err, errBoom) || f.acked != 0 {
		t.Fatalf("failed effect: %v, acked %d", err, f.acked)
	}
	if seen(t, in, "e2") || effects(t, pool) != 1 {
		t.Fatalf("after a failed effect: seen %v, effects %d; want no row and 1 effect", seen(t, in, "e2"), effects(t, pool))
	}
	if _, err := in.Process(ctx, &msg{id: "e2"}, write("e2")); err != nil || effects(t, pool) != 2 {
		t.Fatalf("redelivery after the failure: %v, effects %d", err, effects(t, pool))
	}
	if _, err := in.Process(ctx, &msg{}, write("x")); !errors.Is(err, platform.ErrNoEventID) {
		t.Errorf("no id: want ErrNoEventID, got %v", err)
	}
}

func TestProcessBatch(t *testing.T) {
	pool, in := newInbox(t, platform.DefaultInboxConfig("c1"))
	ctx := context.Background()
	var fail string
	effect := func(tx pgx.Tx, m platform.InboxMsg) error {
		id, _ := platform.EventIDOf(m)
		if _, err := tx.Exec(ctx, `INSERT INTO effects VALUES ($1)`, id); err != nil {
			return err
		}
		if id == fail {
			return errBoom
		}
		return nil
	}
	// Fast path: new ids, a repeat within the batch, one seen before.
	if _, err := in.Process(ctx, &msg{id: "old"}, func(pgx.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	msgs := []*msg{{id: "a"}, {id: "b"}, {id: "a"}, {id: "old"}, {id: "c"}}
	outs, errs, err := in.ProcessBatch(ctx, inboxMsgs(msgs), effect)
	if err != nil {
		t.Fatal(err)
	}
	want := []platform.InboxOutcome{platform.InboxProcessed, platform.InboxProcessed, platform.InboxDuplicate, platform.InboxDuplicate, platform.InboxProcessed}
	for i := range msgs {
		if outs[i] != want[i] || errs[i] != nil || msgs[i].acked != 1 {
			t.Errorf("msg %d (%s): %v %v acked %d, want %v", i, msgs[i].id, outs[i], errs[i], msgs[i].acked, want[i])
		}
	}
	if n := effects(t, pool); n != 3 {
		t.Fatalf("effects %d, want 3", n)
	}
	// A failing effect in a batch: only its message fails, leaving no row
	// and no write; the others commit.
	fail = "e"
	msgs = []*msg{{id: "d"}, {id: "e"}, {id: "f"}, {id: "a"}}
	outs, errs, err = in.ProcessBatch(ctx, inboxMsgs(msgs), effect)
	if err != nil {
		t.Fatal(err)
	}
	want = []platform.InboxOutcome{platform.InboxProcessed, 0, platform.InboxProcessed, platform.InboxDuplicate}
	for i := range msgs {
		if outs[i] != want[i] {
			t.Errorf("msg %s: outcome %v, want %v", msgs[i].id, outs[i], want[i])
		}
	}
	if !errors.Is(errs[1], errBoom) || msgs[1].acked != 0 {
		t.Errorf("failed message: err %v, acked %d", errs[1], msgs[1].acked)
	}
	if seen(t, in, "e") || !seen(t, in, "d") || !seen(t, in, "f") {
		t.Errorf("rows: e %v (want false), d %v, f %v", seen(t, in, "e"), seen(t, in, "d"), seen(t, in, "f"))
	}
	if n := effects(t, pool); n != 5 {
		t.Fatalf("effects %d, want 5 (d and f added, e rolled back)", n)
	}
}

func inboxMsgs(ms []*msg) []platform.InboxMsg {
	out := make([]platform.InboxMsg, len(ms))
	for i, m := range ms {
		out[i] = m
	}
	return out
}

func TestIfNewer(t *testing.T) {
	pool, in := newInbox(t, platform.DefaultInboxConfig("c1"))
	ctx := context.Background()
	for _, step := range []struct {
		version int64
		want    bool
	}{{5, true}, {3, false}, {5, false}, {6, true}} {
		var got bool
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			got, err = in.IfNewer(ctx, tx, "order:1", step.version)
			return err
		})
		if err != nil || got != step.want {
			t.Errorf("IfNewer(%d) = %v, %v; want %v", step.version, got, err, step.want)
		}
	}
	// Another entity and another consumer are independent.
	_ = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if ok, err := in.IfNewer(ctx, tx, "order:2", 1); !ok || err != nil {
			t.Errorf("other entity: %v %v", ok, err)
		}
		return nil
	})
}

func TestPruneInBatches(t *testing.T) {
	cfg := platform.DefaultInboxConfig("c1")
	cfg.PruneBatch = 3
	pool, in := newInbox(t, cfg)
	ctx := context.Background()
	for _, id := range []string{"o1", "o2", "o3", "o4", "o5", "o6", "o7", "n1", "n2"} {
		if _, err := in.Process(ctx, &msg{id: id}, func(pgx.Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE platform_inbox.processed SET processed_at = now() - interval '18 days' WHERE event_id LIKE 'o%'`); err != nil {
		t.Fatal(err)
	}
	n, err := in.Prune(ctx)
	if err != nil || n != 7 {
		t.Fatalf("prune: %d, %v; want the 7 rows older than the retention", n, err)
	}
	if seen(t, in, "o1") || !seen(t, in, "n1") || !seen(t, in, "n2") {
		t.Errorf("after prune: o1 %v n1 %v n2 %v", seen(t, in, "o1"), seen(t, in, "n1"), seen(t, in, "n2"))
	}
}
