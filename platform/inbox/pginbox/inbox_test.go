package pginbox_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/msgplatform/platform/internal/pgtest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/inbox/inboxtest"
	"github.com/msgplatform/platform/platform/inbox/pginbox"
)

func newInbox(t *testing.T, cfg platform.InboxConfig) (*pgxpool.Pool, *pginbox.Inbox) {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
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

func seen(t *testing.T, in *pginbox.Inbox, id string) bool {
	t.Helper()
	ok, err := in.Seen(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestPruneAtTheRetention: Prune deletes, in batches, the rows older than
// the configured retention and keeps the recent ones (the contract can
// only check it deletes nothing recent: it cannot age rows).
func TestPruneAtTheRetention(t *testing.T) {
	cfg := platform.DefaultInboxConfig("c1")
	cfg.PruneBatch = 3
	pool, in := newInbox(t, cfg)
	ctx := context.Background()
	for _, id := range []string{"o1", "o2", "o3", "o4", "o5", "o6", "o7", "n1", "n2"} {
		if _, err := in.Process(ctx, inboxtest.NewMsg(id), func(pgx.Tx) error { return nil }); err != nil {
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
