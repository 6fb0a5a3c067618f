// Package archtest holds tests of the module's structure rather than of
// its behaviour; it has no code of its own.
//
// Guarantee: the packages a service imports to use the platform (platform,
// platform/catalog, platform/consumer, platform/dlq, platform/schema, the
// inbox backends, outboxrelay and its stores), platform/canary and the
// outbox relay's binary link no nats-server package. A service therefore
// builds without the broker, as Litestream's backends import the root
// package and never the reverse. The module's graph, which such a service
// downloads, holds none of the heavy modules only tests use (the browser
// driver, the Prometheus server): their tests live in nested modules.
//
// Failure handled: an import added to a client package, directly or
// through any dependency, that pulls the broker in. TestClientLinksNoServer
// fails naming the client package and the import chain that reaches the
// server, shortest first, so the offending import is the one to move.
//
// Invariants: server-side code (embeddednats, platform/region,
// internal/daemon) imports the client packages, never the reverse; the
// test helper packages (inboxtest, outboxtest) may start servers and are
// not checked.
package archtest
