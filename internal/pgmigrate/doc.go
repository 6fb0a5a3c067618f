// Package pgmigrate applies a package's embedded PostgreSQL migrations.
//
// Guarantee: each migration is applied once, in version order, under a
// session advisory lock, so Apply is safe to run concurrently from several
// processes (every replica of a service may call it at start) and is
// idempotent.
//
// A migration is a file <dir>/<version>_<name>.sql whose name starts with a
// decimal version number (e.g. 0001_outbox.sql); versions must be unique.
// Files are applied in increasing version order. Each migration runs in its
// own transaction together with the row recording its version in
// <schema>.migrations (version int PRIMARY KEY, applied_at timestamptz), so
// a failed migration is rolled back and not recorded, and the migrations
// before it stay applied. The schema and version table are created if
// missing; their layout is the one the platform's stores have always used,
// so existing databases keep working.
//
// A migration's text may name its schema as {{schema}} (SchemaPlaceholder):
// it is replaced by the schema passed to Apply, so one migration set can
// create several instances of a store, each in its own schema.
//
// The lock is pg_advisory_lock(lockKey), held on one connection for the
// whole run. Callers pass a fixed key per migration set, so that binaries
// built before and after a change still serialise against each other.
//
// Errors are prefixed "pgmigrate:".
package pgmigrate
