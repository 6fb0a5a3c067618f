package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// EnvDSN names the variable holding the test server's DSN.
const EnvDSN = "PLATFORM_TEST_PG_DSN"

// NewDatabase creates an empty database for t, drops it when t ends, and
// returns its DSN.
func NewDatabase(t testing.TB) string {
	t.Helper()
	base := os.Getenv(EnvDSN)
	if base == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("pgtest: %s is not set; scripts/test starts PostgreSQL and sets it", EnvDSN)
		}
		t.Skipf("pgtest: %s not set: run ./scripts/test (it starts PostgreSQL), or export %s=$(scripts/postgres)", EnvDSN, EnvDSN)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("pgtest: connect %s: %v", base, err)
	}
	defer admin.Close(ctx)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "test_" + hex.EncodeToString(b)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("pgtest: parse %s: %v", base, err)
	}
	u.Path = "/" + name
	return u.String()
}

// NewPool connects a pool to a fresh database from NewDatabase (skipping
// or failing exactly as it does) and closes the pool when t ends.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), NewDatabase(t))
	if err != nil {
		t.Fatalf("pgtest: connect pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}
