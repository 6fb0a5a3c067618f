// Package outboxrelay is the transactional outbox: a service enqueues an
// event in the same transaction (or Pebble batch) as its business write,
// and a Relay publishes it to its platform topic.
//
// The failure it exists for: a service that writes its database and then
// publishes loses the event when it crashes in between, or publishes an
// event whose transaction rolled back.
//
// Guarantee: at-least-once publication of every committed event, in commit
// order per (topic, key), with Nats-Msg-Id = event id. A crash between
// publish and mark-sent yields a republish with the same Nats-Msg-Id,
// dropped by the stream within its duplicate window and by the consumers'
// inboxes after it. An event whose transaction rolls back is never
// published.
//
// Invariants:
//   - Per-key order: the store never shows a record while a lower Seq of
//     its key may still commit, and only a key's oldest unacked record is
//     in flight, so a retry never overtakes an earlier event. Keys are
//     published in parallel; a key that cannot be published backs off on
//     its own without stalling the others.
//   - A backlog goes out in fast-ingest batches; what a batch stored is a
//     prefix its acks name exactly, and the rest is republished singly.
//   - One active relay per outbox: the fenced lease of internal/kvlease,
//     whose token the store requires to mark anything sent, so a deposed
//     relay marks nothing.
//   - Enqueue touches only the database: the broker never blocks the
//     service; the relay backs off while the broker is down and resumes.
//   - Sent records are pruned after Config.Retention.
//
// Backends: outboxrelay/pgoutbox (PostgreSQL) and outboxrelay/pebbleoutbox
// (Pebble, the embedded default), both held to the contract suite
// outboxrelay/outboxtest. It runs inside a service, as `platformctl outbox
// relay`, or as the static binary cmd/outboxrelay.
//
// Detail (the pipeline, fast batches, the lease's timings, metrics):
// docs/design/outbox.md and docs/design/outbox-fast-batches.md.
package outboxrelay
