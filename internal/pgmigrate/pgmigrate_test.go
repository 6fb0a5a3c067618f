package pgmigrate_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/msgplatform/platform/internal/pgmigrate"
	"github.com/msgplatform/platform/internal/pgtest"
)

const lockKey = 0x0b0c_ffff

// Each migration fails if run twice (no IF NOT EXISTS) or out of order
// (9_b alters the table 0001 creates; 10_c sorts before 9_b by name but
// not by version, and needs column b).
var good = fstest.MapFS{
	"m/0001_t.sql":  {Data: []byte("CREATE TABLE pgm.t (a int); INSERT INTO pgm.t VALUES (1);")},
	"m/9_b.sql":     {Data: []byte("ALTER TABLE pgm.t ADD COLUMN b int;")},
	"m/10_c.sql":    {Data: []byte("ALTER TABLE pgm.t ADD COLUMN c int GENERATED ALWAYS AS (b + 1) STORED;")},
	"m/README.txt":  {Data: []byte("not a migration")},
	"other/9_x.sql": {Data: []byte("SELECT 1/0;")},
}

func newPool(t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func versions(t *testing.T, pool *pgxpool.Pool) []int {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT version FROM pgm.migrations ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	var vs []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		vs = append(vs, v)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return vs
}

func checkApplied(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	if got := versions(t, pool); len(got) != 3 || got[0] != 1 || got[1] != 9 || got[2] != 10 {
		t.Fatalf("versions recorded = %v, want [1 9 10]", got)
	}
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM pgm.t").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("pgm.t has %d rows, want 1 (0001 applied once)", n)
	}
}

func TestApplyTwiceIsIdempotent(t *testing.T) {
	pool := newPool(t, pgtest.NewDatabase(t))
	ctx := context.Background()
	for i := range 2 {
		if err := pgmigrate.Apply(ctx, pool, "pgm", lockKey, good, "m"); err != nil {
			t.Fatalf("Apply #%d: %v", i+1, err)
		}
	}
	checkApplied(t, pool)
}

// TestApplyConcurrent: four "processes" (own pools) migrate one database
// at once; each migration is applied exactly once and all succeed.
func TestApplyConcurrent(t *testing.T) {
	dsn := pgtest.NewDatabase(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		pool := newPool(t, dsn)
		wg.Go(func() { errs[i] = pgmigrate.Apply(ctx, pool, "pgm", lockKey, good, "m") })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Apply in goroutine %d: %v", i, err)
		}
	}
	checkApplied(t, newPool(t, dsn))
}

// TestApplyFailureRollsBack: a failing migration is not recorded, those
// before it stay applied, and the error says pgmigrate and the file.
func TestApplyFailureRollsBack(t *testing.T) {
	pool := newPool(t, pgtest.NewDatabase(t))
	ctx := context.Background()
	bad := fstest.MapFS{
		"m/0001_t.sql":   good["m/0001_t.sql"],
		"m/0002_bad.sql": {Data: []byte("ALTER TABLE pgm.t ADD COLUMN b int; SELECT 1/0;")},
	}
	err := pgmigrate.Apply(ctx, pool, "pgm", lockKey, bad, "m")
	if err == nil || !strings.HasPrefix(err.Error(), "pgmigrate:") || !strings.Contains(err.Error(), "0002_bad.sql") {
		t.Fatalf("Apply error = %v, want pgmigrate: ... 0002_bad.sql ...", err)
	}
	if got := versions(t, pool); len(got) != 1 || got[0] != 1 {
		t.Fatalf("versions recorded = %v, want [1]", got)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM information_schema.columns WHERE table_schema = 'pgm' AND table_name = 't' AND column_name = 'b'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatal("column b of the failed migration was not rolled back")
	}
	// The lock was released: a fixed set applies on the same pool.
	if err := pgmigrate.Apply(ctx, pool, "pgm", lockKey, good, "m"); err != nil {
		t.Fatalf("Apply after failure: %v", err)
	}
	checkApplied(t, pool)
}

func TestApplyRejectsBadInput(t *testing.T) {
	pool := newPool(t, pgtest.NewDatabase(t))
	ctx := context.Background()
	for name, tc := range map[string]struct {
		schema string
		fsys   fstest.MapFS
	}{
		"schema":     {"pgm; DROP", good},
		"unnumbered": {"pgm", fstest.MapFS{"m/init.sql": {Data: []byte("SELECT 1")}}},
		"duplicate":  {"pgm", fstest.MapFS{"m/1_a.sql": {Data: []byte("SELECT 1")}, "m/01_b.sql": {Data: []byte("SELECT 1")}}},
		"empty":      {"pgm", fstest.MapFS{"m/x.txt": {}}},
	} {
		err := pgmigrate.Apply(ctx, pool, tc.schema, lockKey, tc.fsys, "m")
		if err == nil || !strings.HasPrefix(err.Error(), "pgmigrate:") {
			t.Errorf("%s: Apply error = %v, want pgmigrate: ...", name, err)
		}
	}
}

// TestSchemaPlaceholder: one migration set naming its schema {{schema}}
// is applied to two schemas of one database; each gets its own table and
// its own version record, and re-applying either is a no-op. An invalid
// schema is refused before anything runs.
func TestSchemaPlaceholder(t *testing.T) {
	ctx := context.Background()
	pool := newPool(t, pgtest.NewDatabase(t))
	fsys := fstest.MapFS{"m/0001_t.sql": {Data: []byte("CREATE TABLE {{schema}}.t (a int); INSERT INTO {{schema}}.t VALUES (1);")}}
	for _, schema := range []string{"one_outbox", "two_outbox", "one_outbox"} {
		if err := pgmigrate.Apply(ctx, pool, schema, lockKey, fsys, "m"); err != nil {
			t.Fatalf("Apply %s: %v", schema, err)
		}
	}
	for _, schema := range []string{"one_outbox", "two_outbox"} {
		var rows, migrations int
		if err := pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+schema+".t), (SELECT count(*) FROM "+schema+".migrations)").Scan(&rows, &migrations); err != nil {
			t.Fatal(err)
		}
		if rows != 1 || migrations != 1 {
			t.Fatalf("%s: %d rows, %d migrations recorded; want 1 and 1", schema, rows, migrations)
		}
	}
	if err := pgmigrate.Apply(ctx, pool, "Bad;DROP", lockKey, fsys, "m"); err == nil || !strings.Contains(err.Error(), "invalid schema") {
		t.Fatalf("Apply with an invalid schema: %v, want an invalid schema error", err)
	}
}
