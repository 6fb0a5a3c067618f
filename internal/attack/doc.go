// Package attack is the platform's attack suite: tests that try, as an
// adversary would, every route around a guarantee the platform makes
// (identity comes from the principal, platform headers belong to the
// platform, quotas count what is stored, tenants and teams are isolated,
// listeners refuse the unauthenticated, resident data stays in its
// region), with the real nats CLI, nats.go and platformctl-issued creds.
// Each attempt asserts the refusal and that nothing changed.
//
// Refused records a route that held: with PLATFORM_ATTACK_LOG set (as
// scripts/test sets it), one line "attack.<name>: refused" is appended to
// that file when the test passes, so the run lists every route tried.
// Attack tests elsewhere in the tree call it too.
package attack
