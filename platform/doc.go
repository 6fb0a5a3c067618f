// Package platform holds the domain of the messaging platform and the
// library Go services use: declarative topics (partitioned, retained logs),
// queues (work queues with leases) and consumer groups, the JetStream
// objects that carry them, and the Publisher. It links no broker: no
// package it imports depends on nats-server (internal/archtest checks
// it). Reconciliation, describe and group reset are in platform/catalog,
// canaries in platform/canary, regions and residency in platform/region,
// the consumer runtime (Member, Workers, retries, dead-lettering) in
// platform/consumer; all import this package, never the reverse.
//
// Guarantees:
//   - A topic is addressable as <topic>.<key> by any NATS client (the nats
//     CLI included). Its stream's subject transform partition(N,1) stores
//     every event as <topic>.<partition>.<key>, so events with the same key
//     always land on the same partition, in publish order. PartitionOf
//     computes the same partition (fnv32a(key) mod N) on the client.
//   - Validate reports every problem of a spec or Catalog at once, keyed
//     like the configuration ("topics.orders.partitions: ...").
//   - The Publisher stores an event once per event id within
//     DuplicateWindow, and says whether a failed publish was refused or
//     has an unknown outcome (ErrPublishRefused, ErrPublishUnknown).
//
// Invariants (of the objects TopicStreamConfig, QueueStreamConfig,
// QueueConsumerConfig and GroupConsumerConfig describe):
//   - The replicated record of a spec is its stream's metadata
//     (platform.kind, platform.partitions, platform.key, platform.owner,
//     platform.residency for topics; platform.lease, platform.max_attempts
//     for queues) and its consumers' (platform.group, platform.partition,
//     platform.topic). TopicFromStream and QueueFromStream read specs back
//     from it; streams without platform.kind are not the platform's.
//   - A topic with N partitions has, per group, the N durable consumers
//     PartitionConsumer(group, 0..N-1), each filtered to
//     PartitionSubject(topic, p), pinned-client priority group named after
//     the group, and replicas following the stream.
//   - A queue has one work-queue stream and one durable consumer,
//     QueueConsumer, whose AckWait is the lease and MaxDeliver the attempts.
//   - Every platform stream has AllowDirect, so committed data stays
//     readable while it has no leader.
package platform
