// Package pgtest gives each test a fresh PostgreSQL database on the real
// server that scripts/test starts (scripts/postgres). The server's DSN comes
// from PLATFORM_TEST_PG_DSN. Without it a test is skipped with a message,
// except under CI=true, where a missing database is a failure: the suite
// must never pass by skipping the Postgres paths.
package pgtest
