package bench

import (
	"context"

	"github.com/cockroachdb/pebble/v2"
	"github.com/jackc/pgx/v5/pgxpool"
)

// OpenStores opens the databases a store harness (outbox, inbox) measures:
// a TempPebble and, unless o.SkipPostgres, a fresh Database migrated with
// migrate (pool is nil when skipped). cleanup closes and removes both.
func OpenStores(ctx context.Context, o StoreOptions, migrate func(context.Context, *pgxpool.Pool) error) (db *pebble.DB, pool *pgxpool.Pool, cleanup func(), err error) {
	db, closeDB, err := TempPebble()
	if err != nil {
		return nil, nil, nil, err
	}
	if o.SkipPostgres {
		return db, nil, closeDB, nil
	}
	pool, drop, err := Database(ctx, o.DSN)
	if err != nil {
		closeDB()
		return nil, nil, nil, err
	}
	cleanup = func() { drop(); closeDB() }
	if err := migrate(ctx, pool); err != nil {
		cleanup()
		return nil, nil, nil, err
	}
	return db, pool, cleanup, nil
}
