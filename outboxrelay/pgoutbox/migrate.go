package pgoutbox

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrations embed.FS

// migrationLock is the advisory lock serialising concurrent Migrate calls.
const migrationLock = 0x0b0c_0001

// Migrate applies the package's migrations not yet applied, each in its own
// transaction, under an advisory lock (safe to call from every replica of
// a service at start). It is idempotent.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	return migrate(ctx, pool, migrations, "outboxrelay")
}

// migrate applies the *.sql files of fsys in name order, recording each in
// <schema>.migrations.
func migrate(ctx context.Context, pool *pgxpool.Pool, fsys fs.FS, schema string) error {
	names, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("pgoutbox: migrate: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(migrationLock)); err != nil {
		return fmt.Errorf("pgoutbox: migrate: lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", int64(migrationLock))
	setup := fmt.Sprintf(`CREATE SCHEMA IF NOT EXISTS %[1]s;
CREATE TABLE IF NOT EXISTS %[1]s.migrations (version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`, schema)
	if _, err := conn.Exec(ctx, setup); err != nil {
		return fmt.Errorf("pgoutbox: migrate: %w", err)
	}
	for _, name := range names {
		base := strings.TrimPrefix(name, "migrations/")
		v, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil {
			return fmt.Errorf("pgoutbox: migration %s: name must start with a number", name)
		}
		sql, err := fs.ReadFile(fsys, name)
		if err != nil {
			return err
		}
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			var done bool
			if err := tx.QueryRow(ctx, fmt.Sprintf("SELECT EXISTS (SELECT 1 FROM %s.migrations WHERE version = $1)", schema), v).Scan(&done); err != nil {
				return err
			}
			if done {
				return nil
			}
			if _, err := tx.Exec(ctx, string(sql)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, fmt.Sprintf("INSERT INTO %s.migrations (version) VALUES ($1)", schema), v)
			return err
		})
		if err != nil {
			return fmt.Errorf("pgoutbox: migration %s: %w", base, err)
		}
	}
	return nil
}
