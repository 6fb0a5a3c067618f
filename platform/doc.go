// Package platform holds the domain of the messaging platform and the
// library Go services use: declarative topics (partitioned, retained logs),
// queues (work queues with leases) and consumer groups, and their
// reconciliation onto JetStream (Reconciler). It links no broker: no
// package it imports depends on nats-server (internal/archtest checks
// it). Regions and residency are in platform/region, the consumer runtime
// (Member, Workers, retries, dead-lettering) in platform/consumer; both
// import this package, never the reverse.
//
// Guarantees:
//   - A topic is addressable as <topic>.<key> by any NATS client (the nats
//     CLI included). Its stream's subject transform partition(N,1) stores
//     every event as <topic>.<partition>.<key>, so events with the same key
//     always land on the same partition, in publish order. PartitionOf
//     computes the same partition (fnv32a(key) mod N) on the client.
//   - Apply is idempotent: applying the same catalog twice reports every
//     object unchanged and sends no create, update or delete request.
//   - Apply is checked before it acts: it validates the whole catalog, reads
//     the current state of every object and refuses, without applying
//     anything, any change that would break a guarantee the object already
//     gives: a partition-count change (it moves keys between partitions and
//     breaks per-key order), lowering replicas below 3 without
//     ApplyOptions.AllowReducedReplicas, turning a topic into a queue or
//     back, taking the name or subjects of a stream the platform does not
//     manage. Every problem is reported at once, keyed like the
//     configuration ("topics.orders.partitions: ...").
//
// Failure handled: losing one node of three, before or during Apply. The
// surviving quorum takes every change; transient JetStream errors (request
// timeouts, no responders, leader elections, offline consumer peers) are
// retried with jittered backoff, bounded by the ctx and
// ReconcilerOptions.RetryFor. Every step is idempotent, so an attempt that
// timed out but succeeded converges. Apply is not atomic across objects: if
// the cluster fails for longer than the retry bound, the objects applied so
// far stay applied and running Apply again finishes the job.
//
// Invariants:
//   - The replicated record of a spec is its stream's metadata
//     (platform.kind, platform.partitions, platform.key, platform.owner,
//     platform.residency for topics; platform.lease, platform.max_attempts
//     for queues) and its consumers' (platform.group, platform.partition,
//     platform.topic). List, Describe and Apply's conflict checks read specs
//     back from it; streams without platform.kind are not the platform's.
//   - A topic with N partitions has, per group, exactly the N durable
//     consumers PartitionConsumer(group, 0..N-1), each filtered to
//     PartitionSubject(topic, p), pinned-client priority group named after
//     the group, and replicas following the stream.
//   - A queue has one work-queue stream and one durable consumer,
//     QueueConsumer, whose AckWait is the lease and MaxDeliver the attempts.
//   - Every platform stream has AllowDirect, so committed data (and
//     Describe's partition counts) stay readable while it has no leader.
package platform
