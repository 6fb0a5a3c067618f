package pgoutbox

import (
	"context"
	"embed"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/msgplatform/platform/internal/pgmigrate"
)

//go:embed migrations/*.sql
var migrations embed.FS

// migrationLock is the advisory lock serialising concurrent Migrate calls.
// It must not change: binaries of different versions serialise on it.
const migrationLock = 0x0b0c_0001

// Migrate applies the package's migrations not yet applied (versions
// recorded in outboxrelay.migrations), each in its own transaction, under
// an advisory lock (safe to call from every replica of a service at
// start). It is idempotent. See internal/pgmigrate.
//
// It migrates the outbox in the default schema; for another one, use
// Store.Migrate.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return pgmigrate.Apply(ctx, pool, DefaultSchema, migrationLock, migrations, "migrations")
}

// Migrate is the package's Migrate for this store's schema (versions
// recorded in <schema>.migrations). Every outbox's migrations serialise
// on one advisory lock.
func (s *Store) Migrate(ctx context.Context) error {
	return pgmigrate.Apply(ctx, s.pool, s.q.schema, migrationLock, migrations, "migrations")
}
