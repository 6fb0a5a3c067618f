// Package platform holds the domain of the messaging platform and the
// library Go services use: declarative topics (partitioned, retained logs),
// queues (work queues with leases) and consumer groups, and their
// reconciliation onto JetStream.
//
// Guarantees:
//   - A topic is addressable as <topic>.<key> by any NATS client. A
//     deterministic subject transform (partition(N) over the key token)
//     stores every event under <topic>.<partition>.<key>, so events with
//     the same key always land on the same partition, in publish order.
//   - Reconcile is idempotent, and refuses, without applying anything, a
//     change that would break a guarantee the object already gives: a
//     partition-count change (it moves keys between partitions and breaks
//     per-key order), or lowering replicas below 3 without an explicit
//     flag.
package platform
