package pgmigrate

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SchemaPlaceholder, in a migration's text, is replaced by the schema
// passed to Apply: one migration set can then create several instances of
// a store in one database, each in its own schema (e.g. several outboxes).
const SchemaPlaceholder = "{{schema}}"

// ValidSchema reports whether s can be passed to Apply as a schema: an
// unquoted lower-case SQL identifier (letters, digits, '_'; not starting
// with a digit; at most 63 bytes), safe to splice into statements.
func ValidSchema(s string) bool { return validIdent(s) }

// Apply applies the migrations of fsys under dir (files dir/*.sql) not yet
// recorded in <schema>.migrations, under pg_advisory_lock(lockKey), on one
// connection acquired from pool. See the package documentation.
func Apply(ctx context.Context, pool *pgxpool.Pool, schema string, lockKey int64, fsys fs.FS, dir string) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("pgmigrate: %s: acquire: %w", schema, err)
	}
	defer conn.Release()
	return ApplyConn(ctx, conn.Conn(), schema, lockKey, fsys, dir)
}

// ApplyConn is Apply on a given connection. The connection must not be in
// a transaction. If the advisory lock cannot be released (e.g. the context
// was cancelled mid-run and the connection broke), the connection is
// closed so that no lock is left held by a pooled session.
func ApplyConn(ctx context.Context, conn *pgx.Conn, schema string, lockKey int64, fsys fs.FS, dir string) (err error) {
	if !validIdent(schema) {
		return fmt.Errorf("pgmigrate: invalid schema name %q", schema)
	}
	files, err := list(fsys, dir)
	if err != nil {
		return fmt.Errorf("pgmigrate: %s: %w", schema, err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", lockKey); err != nil {
		return fmt.Errorf("pgmigrate: %s: lock: %w", schema, err)
	}
	defer func() {
		uctx := context.WithoutCancel(ctx)
		if _, uerr := conn.Exec(uctx, "SELECT pg_advisory_unlock($1)", lockKey); uerr != nil {
			_ = conn.Close(uctx) // releases the session lock
			if err == nil {
				err = fmt.Errorf("pgmigrate: %s: unlock: %w", schema, uerr)
			}
		}
	}()
	setup := fmt.Sprintf(`CREATE SCHEMA IF NOT EXISTS %[1]s;
CREATE TABLE IF NOT EXISTS %[1]s.migrations (version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`, schema)
	if _, err := conn.Exec(ctx, setup); err != nil {
		return fmt.Errorf("pgmigrate: %s: setup: %w", schema, err)
	}
	record := fmt.Sprintf("INSERT INTO %s.migrations (version) VALUES ($1) ON CONFLICT DO NOTHING", schema)
	for _, f := range files {
		sql, err := fs.ReadFile(fsys, f.path)
		if err != nil {
			return fmt.Errorf("pgmigrate: %s: %w", schema, err)
		}
		stmt := strings.ReplaceAll(string(sql), SchemaPlaceholder, schema)
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, record, f.version)
			if err != nil || tag.RowsAffected() == 0 { // already applied
				return err
			}
			_, err = tx.Exec(ctx, stmt)
			return err
		})
		if err != nil {
			return fmt.Errorf("pgmigrate: %s: migration %s: %w", schema, path.Base(f.path), err)
		}
	}
	return nil
}

type file struct {
	path    string
	version int
}

// list returns dir/*.sql in increasing version order.
func list(fsys fs.FS, dir string) ([]file, error) {
	names, err := fs.Glob(fsys, path.Join(dir, "*.sql"))
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no migrations in %s", dir)
	}
	files := make([]file, 0, len(names))
	seen := make(map[int]string, len(names))
	for _, name := range names {
		base := path.Base(name)
		v, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil || v < 0 {
			return nil, fmt.Errorf("migration %s: name must start with a version number", base)
		}
		if prev, ok := seen[v]; ok {
			return nil, fmt.Errorf("migrations %s and %s: duplicate version %d", prev, base, v)
		}
		seen[v] = base
		files = append(files, file{path: name, version: v})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].version < files[j].version })
	return files, nil
}

// validIdent reports whether s is an unquoted lower-case SQL identifier,
// safe to splice into statements.
func validIdent(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c == '_':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
