// Package catalog reconciles declared topics, queues and groups
// (platform.Catalog) onto JetStream, and reads them back: list and
// describe (per-partition counts, group lag in count and time), the
// catalog metrics for the alert rules, and group reset (replay by time).
// It imports platform, never the reverse, and links no broker.
//
// Guarantees:
//   - Apply is idempotent: applying the same catalog twice reports every
//     object unchanged and sends no create, update or delete request.
//   - Apply is checked before it acts: it validates the whole catalog, reads
//     the current state of every object and refuses, without applying
//     anything, any change that would break a guarantee the object already
//     gives: a partition-count change (it moves keys between partitions and
//     breaks per-key order), lowering replicas below 3 without
//     ApplyOptions.AllowReducedReplicas, switching cleanup without
//     ApplyOptions.AllowCleanupChange, turning a topic into a queue or
//     back, taking the name or subjects of a stream the platform does not
//     manage. Every problem is reported at once, keyed like the
//     configuration ("topics.orders.partitions: ..."), as
//     platform.ErrInvalidSpec, ErrConflict or ErrNotFound.
//   - A group reset on a topic marked review: required moves nothing
//     without an approved request (ErrApprovalRequired).
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
//   - Apply compares and updates only the fields and the platform.*
//     metadata the platform manages; fields an operator tuned by hand and
//     the server's own metadata are kept.
//   - After Apply a group has exactly one consumer per partition of its
//     topic (strays are deleted), and every topic and queue has its DLQ
//     and advisory streams with the DLQ's retention and owner.
//   - List, Describe and the conflict checks read specs back from stream
//     and consumer metadata (the replicated record); Describe's partition
//     counts are direct gets, so they stay readable while a stream has no
//     leader.
package catalog
