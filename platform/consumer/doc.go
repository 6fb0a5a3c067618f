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
//   - Per-key order in a group: one member owns a partition at a time
//     (assignment in GroupMembersBucket, written by the lowest live member
//     with compare-and-set), and a partition's events are handled one
//     after another. A new owner, or a runner that sees a delivery lost
//     (a jump in the consumer's delivery sequence), resets the consumer
//     to its ack floor, so every unacknowledged event comes again in
//     stream order before anything newer. A failing key is parked while
//     the partition's other keys proceed.
//   - At-least-once: an event is acknowledged only after its handler
//     returned nil. Repeats (after a crash, a handover or a reset) carry
//     the same Seq and event id, for an inbox or the fence to catch.
//   - Retries: a transient failure is retried with NakWithDelay after a
//     full-jitter backoff (RetryPolicy: uniform in [MinDelay, Ceiling(n)]),
//     so nothing blocks a partition while it waits, up to the consumer's
//     MaxDeliver. A RetryBudget per consumer turns a dependency's outage
//     into a trickle of retries at the longest delay, not a storm.
//   - Dead letters: a failure that is permanent, a decode failure, or the
//     last attempt is written once to the object's DLQ (dlq.Write: the
//     original payload and headers, the reason, its class, the attempt
//     count and the first and last failure times, the first kept in
//     dlq.FirstFailuresBucket across crashes and handovers), then
//     terminated on its consumer. Member and Workers run a dlq.Router
//     for their object (unless NoDLQRouter), which writes the entry for
//     an event the broker stopped delivering or a client terminated.
//   - Fencing: NATS applies an ack by stream sequence whoever sends it,
//     so a runner settles (ack, nak, dead-letter) only while it holds the
//     partition and its membership was renewed less than TTL-Heartbeat
//     ago. Message.Fence is the assignment generation, increasing with
//     every change of owner: a store that rejects a lower fence than it
//     has seen never accepts a write from a member that lost the
//     partition.
//
// Failure handled: a member or worker that crashes, stalls or loses its
// connection. A member dead for TTL (measured on the broker's clock)
// loses its partitions to live members, which resume at the ack floor.
// Live Workers give back the jobs of a Workers instance whose session
// (platform.WorkerSessionsBucket) lapsed, about SessionTTL after the loss
// instead of a whole lease; the lease remains the fallback.
//
// Invariants:
//   - A partition changes owner only after its previous owner drained
//     (DrainTimeout) and said so, or was declared dead.
//   - A canary is acknowledged without reaching a handler; a redriven
//     event (platform.HeaderRedriveGroup) reaches only the group named.
//   - An event reaches its DLQ once, whoever writes it (the runtime, a
//     member taking over, the router).
package consumer
