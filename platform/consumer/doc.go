// Package consumer runs handlers over the platform's topics and queues:
// Member joins a consumer group and handles the partitions assigned to
// it; Workers take jobs from a queue. A Handler gets a *Message and
// returns nil (acknowledged), an error (retried) or Permanent(err) /
// DecodeError(err) (dead-lettered at once). It imports platform and
// platform/dlq, neither of which imports it, and it links no broker.
//
// Each delivery passes one chain of Middleware, the same for Member and
// Workers: skip canaries, skip events redriven to another group, then
// dead-letter, retry or acknowledge by the handler's result, around the
// span, the panic recovery, the config's own Middleware and the handler.
//
// Guarantees:
//   - Per-key order in a group: one member owns a partition at a time, and
//     a partition's events are handled one after another. A new owner, or
//     a lost delivery, resets the consumer to its ack floor, so every
//     unacknowledged event comes again in order before anything newer. A
//     failing key is parked while the partition's other keys proceed.
//   - At-least-once: an event is acknowledged only after its handler
//     returned nil; a repeat carries the same Seq and event id.
//   - Retries wait a full-jitter backoff outside the partition (a delayed
//     nak), up to MaxDeliver; a RetryBudget turns an outage into a trickle.
//   - Dead letters: a permanent or decode failure, or the last attempt, is
//     written once to the object's DLQ with its payload, headers, reason,
//     class, attempts and failure times, then terminated; a dlq.Router
//     writes the entry of an event the broker gave up on.
//   - Fencing: a runner settles only while it holds the partition and its
//     membership is fresh; Message.Fence increases with every change of
//     owner, so a store that refuses a lower fence never accepts a write
//     from a member that lost the partition.
//
// Failure handled: a member or worker that crashes, stalls or loses its
// connection. A member dead for TTL loses its partitions to live members,
// which resume at the ack floor; Workers give back a lapsed instance's
// jobs after SessionTTL, the lease remaining the fallback.
//
// Invariants: a partition changes owner only after its owner drained or
// was declared dead; a canary never reaches a handler; an event reaches
// its DLQ once, whoever writes it.
//
// Detail: docs/design/consumer.md.
package consumer
