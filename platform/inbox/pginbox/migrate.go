package pginbox

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
const migrationLock = 0x0b0c_0002

// Migrate applies the inbox migrations not yet applied (schema
// platform_inbox, versions recorded in platform_inbox.migrations), each in
// its own transaction, under an advisory lock. It is idempotent. See
// internal/pgmigrate.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return pgmigrate.Apply(ctx, pool, "platform_inbox", migrationLock, migrations, "migrations")
}
