package bench

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/msgplatform/platform/internal/pgtest"
)

// OpenStores opens a Pebble database and, unless Postgres is skipped, a
// fresh PostgreSQL database it migrates; cleanup removes the Pebble
// directory and drops the PostgreSQL database.
func TestOpenStores(t *testing.T) {
	ctx := context.Background()
	migrated := 0
	migrate := func(ctx context.Context, pool *pgxpool.Pool) error {
		migrated++
		_, err := pool.Exec(ctx, `CREATE TABLE bench_probe (k text)`)
		return err
	}
	db, pool, cleanup, err := OpenStores(ctx, StoreOptions{SkipPostgres: true}, migrate)
	if err != nil {
		t.Fatal(err)
	}
	if db == nil || pool != nil || migrated != 0 {
		t.Fatalf("skipping Postgres: db %v, pool %v, migrated %d; want a Pebble database only", db, pool, migrated)
	}
	if err := db.Set([]byte("k"), []byte("v"), nil); err != nil {
		t.Fatal(err)
	}
	cleanup()

	dsn := pgtest.NewDatabase(t)
	db, pool, cleanup, err = OpenStores(ctx, StoreOptions{DSN: dsn}, migrate)
	if err != nil {
		t.Fatal(err)
	}
	if db == nil || pool == nil || migrated != 1 {
		t.Fatalf("with Postgres: db %v, pool %v, migrated %d; want both, migrated once", db, pool, migrated)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO bench_probe VALUES ('x')`); err != nil {
		t.Fatalf("the migrated table: %v", err)
	}
	var name string
	if err := pool.QueryRow(ctx, `SELECT current_database()`).Scan(&name); err != nil {
		t.Fatal(err)
	}
	cleanup()
	admin, err := pgxpool.New(ctx, os.Getenv(pgtest.EnvDSN))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var n int
	if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_database WHERE datname = $1`, name).Scan(&n); err != nil || n != 0 {
		t.Fatalf("database %s after cleanup: %d, %v; want dropped", name, n, err)
	}
}
