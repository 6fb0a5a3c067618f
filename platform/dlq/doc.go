// Package dlq holds the platform's dead letters: the entry of an event
// that failed for good (Entry, ErrorClass, the Header* fields), writing
// it (Write, used by the consumer runtime and the Router), reading it
// back (Read, ParseEntry), the first-failure record that survives the
// consumer process (FirstFailures), and the Router, which writes the
// entries no consumer could. The DLQ streams themselves (names, subjects,
// retention: platform.DLQStream, platform.DLQSubject, platform.DLQSpec)
// are the platform package's, applied with every topic and queue. It
// imports platform; platform never imports it, platform/consumer does,
// and it links no broker.
//
// Guarantees:
//   - One entry per event and consumer: an entry is stored on
//     $DLQ.<stream>.<consumer>.<seq> with Nats-Msg-Id
//     dlq:<stream>:<consumer>:<seq> in a stream that keeps one message
//     per subject and refuses a second, so the runtime, a member taking
//     over and the Router may all write it and it is stored once. Write
//     returns nil when the entry was there already.
//   - An entry keeps the event: its payload and headers unchanged (less
//     the broker's Nats-* ones; the event id is kept as
//     Platform-Event-Id), plus the reason, class, attempts, original
//     location, tenant and the first and last failure times.
//   - An event the broker stopped delivering because its consumer died on
//     the last attempt (MAX_DELIVERIES), or that a client terminated
//     without a copy (MSG_TERMINATED), still gets its entry: the advisory
//     is captured in the object's DLQ events stream, so a Router started
//     later writes it too; for a work queue it then deletes the job.
//
// Failure handled: a consumer that crashes between its attempts or on its
// last one, and a Router whose consumer leader dies (routers of one
// object compete on one durable consumer; another takes the advisory).
//
// Invariants: the first failure recorded in FirstFailuresBucket is never
// overwritten by a later one (compare-and-set, first writer wins), and
// the record is deleted once the entry is written; its TTL bounds what a
// crash leaves.
package dlq
