// Package jserr classifies the errors of JetStream requests by what the
// caller should do next, matching error values and API error codes, never
// message strings. It is the one place the platform decides that an error
// means "you lost a compare-and-set" or "try again in a moment".
//
// Invariants:
//   - WrongRevision is true for every form nats-server 2.15 and nats.go
//     1.55 give a compare-and-set conflict: KV Create of a key that exists,
//     KV Update, Delete or Purge at a revision that is no longer the last,
//     and a publish with an expected last sequence, on a single replica
//     (code 10071) and on a replicated stream (code 10164) alike. A caller
//     that treats a conflict as anything else keeps acting on a lease or
//     record another process has taken over.
//   - Refused is true only when a publish certainly did not store its
//     event; every other publish error is an unknown outcome.
//   - Transient is true only for errors after which the same request may
//     succeed unchanged: no answer (or none in time), a connection that is
//     reconnecting, and the API codes of a cluster electing a leader or
//     converging. A refusal (bad config, not found, permission) is never
//     transient.
//
// The package links no broker: it imports nats.go only, so client
// packages may use it.
package jserr
