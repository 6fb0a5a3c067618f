// Package outboxrelay is the transactional outbox: a service enqueues an
// event in the same transaction (or Pebble batch) as its business write,
// and a Relay publishes it to its platform topic.
//
// Guarantee: at-least-once publication of every committed event, in commit
// order per (topic, key), with Nats-Msg-Id = event id. A crash between
// publish and mark-sent yields a republish with the same Nats-Msg-Id,
// dropped by the stream within its duplicate window (2 min on platform
// topics) and by the consumers' inboxes (platform.Inbox) after it. An
// event whose transaction rolls back is never published.
//
// Invariants:
//   - Per-key order. The store returns unsent records in Seq order and
//     never shows a record while a lower Seq of its key may still commit
//     (pgoutbox: a per-key advisory lock taken before the identity value is
//     drawn; pebbleoutbox: records above the lowest uncommitted Seq are
//     held back). The relay pipelines reading, publishing and marking
//     (pipeline.go): the next batch is read, excluding the records already
//     in flight, and the acked ones are marked while others are being
//     published. Reads grow with the pipeline: one publish window first,
//     then no more than the records already held, up to BatchSize, so
//     publishing never waits for a large read. Only a key's oldest unacked record is ever published, so
//     the next record of a key is sent only after the previous one is
//     acked, and a failed one is retried (same Nats-Msg-Id) before anything
//     behind it: a retry never overtakes an earlier event. Different keys
//     are published in parallel (async, up to MaxInFlight); a key whose
//     publish fails backs off on its own, so events that cannot be
//     published (a topic with no stream) do not stall the other keys.
//   - Fast batches (fastbatch.go). A backlog (at least 32 keys ready at
//     once) is published in nats-server fast-ingest batches (platform
//     topics allow them: allow_batched), acknowledged once per flow window
//     instead of once per event, which saves the brokers and the relay a
//     message per event. The batches stop at the first message the stream
//     refuses, so what a batch stored is a prefix: its flow acks and final
//     PubAck say exactly which events are stored, and the rest are
//     republished at once by single publishes (whose acks are exact: a
//     refused event then backs off on its own). A key still has one
//     publish in flight, batched or not. Steady traffic, a term's first
//     read and every retry go by single publishes; a stream that refuses
//     batches gets single publishes. The stream does not say which of a
//     batch's events were duplicates: those count as ok.
//     Config.SinglePublishes turns batches off.
//   - One active relay per outbox. The lease (internal/kvlease) is a
//     JetStream KV key per outbox updated by revision CAS; the acquiring
//     revision is the fencing
//     token, recorded in the store (Fence) and required by MarkSent, so a
//     deposed relay cannot mark anything. A standby takes over after
//     LeaseTTL without a renewal (a few seconds); a holder stops publishing
//     after LeaseTTL/2 without one. A deposed relay's in-flight publishes
//     are repeats of unmarked events: deduplicated like any republish.
//   - The broker never blocks the service: Enqueue touches only the
//     database. While the broker is down the relay backs off (exponential,
//     full jitter) and resumes by itself.
//   - Sent records are pruned after Config.Retention in small batches.
//
// Metrics (Config.Registerer): outboxrelay_oldest_unsent_age_seconds,
// outboxrelay_backlog_events, outboxrelay_publishes_total{outcome=ok|
// duplicate|error|unknown}, outboxrelay_fast_batch_publishes_total{result=
// stored|retried}, outboxrelay_leader.
//
// Backends: outboxrelay/pgoutbox (PostgreSQL via pgx, migrations embedded;
// several outboxes per database, one schema each) and
// outboxrelay/pebbleoutbox (Pebble, the embedded default). Both pass the
// shared contract suite outboxrelay/outboxtest.
//
// Deployment: inside the service (New, Start/Run, Close), as
// `platformctl outbox relay --dsn`, or as the static binary cmd/outboxrelay
// (Prometheus metrics on --http, graceful stop on SIGTERM).
package outboxrelay
