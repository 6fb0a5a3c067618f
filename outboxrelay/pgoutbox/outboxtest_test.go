package pgoutbox_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/msgplatform/platform/internal/pgtest"
	"github.com/msgplatform/platform/outboxrelay"
	"github.com/msgplatform/platform/outboxrelay/outboxtest"
	"github.com/msgplatform/platform/outboxrelay/pgoutbox"
)

// TestStoreContract runs the shared backend suite against PostgreSQL,
// once in the default schema and once in a second outbox's schema.
func TestStoreContract(t *testing.T) {
	for _, schema := range []string{"", "second_outbox"} {
		t.Run("schema="+schema, func(t *testing.T) {
			outboxtest.Run(t, outboxtest.Harness{Open: func(t *testing.T) (outboxrelay.Store, outboxtest.Enqueue) {
				ctx := context.Background()
				pool := pgtest.NewPool(t)
				s, err := pgoutbox.Open(pool, pgoutbox.Options{Schema: schema})
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Migrate(ctx); err != nil {
					t.Fatal(err)
				}
				return s, func(ctx context.Context, evs ...outboxrelay.Event) error {
					return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
						for _, ev := range evs {
							if err := s.Enqueue(ctx, tx, ev); err != nil {
								return err
							}
						}
						return nil
					})
				}
			}})
		})
	}
}
