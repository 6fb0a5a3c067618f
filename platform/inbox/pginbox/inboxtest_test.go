package pginbox_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/msgplatform/platform/internal/pgtest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/inbox/inboxtest"
	"github.com/msgplatform/platform/platform/inbox/pginbox"
)

// TestInboxContract runs the shared inbox suite against PostgreSQL.
func TestInboxContract(t *testing.T) {
	inboxtest.Run(t, inboxtest.Harness[pgx.Tx]{
		Open: func(t *testing.T, cfg platform.InboxConfig) *inboxtest.Backend[pgx.Tx] {
			pool, in := newInbox(t, cfg)
			return &inboxtest.Backend[pgx.Tx]{
				Inbox: in,
				Write: func(tx pgx.Tx, name string) error {
					_, err := tx.Exec(context.Background(), `INSERT INTO effects (event_id) VALUES ($1)`, name)
					return err
				},
				Count: func(t *testing.T, name string) int {
					t.Helper()
					var n int
					if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM effects WHERE event_id = $1`, name).Scan(&n); err != nil {
						t.Fatal(err)
					}
					return n
				},
				Seen:         in.Seen,
				Prune:        in.Prune,
				PruneBefore:  in.PruneBefore,
				IfNewer:      in.IfNewer,
				ProcessBatch: in.ProcessBatch,
			}
		},
		New: func(t *testing.T, cfg platform.InboxConfig) error {
			_, err := pginbox.New(pgtest.NewPool(t), cfg)
			return err
		},
	})
}
