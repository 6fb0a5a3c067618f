package consumer

// Consumer runtime (issue 5): design notes.
//
// Groups: Member (group_member.go, consumer_partition.go). Each group has
// one durable pull consumer per partition with a pinned-client priority
// group (created by the Reconciler). Membership and assignment are the
// platform's own, in the replicated KV bucket GroupMembersBucket, not
// orbit.go/pcgroups: pcgroups keys its consumers per member (not the
// <group>-p<N> per-partition consumers the Reconciler manages, which
// hold each partition's position independently of who consumes it) and
// moves partitions by admin calls, while the issue needs liveness-driven,
// sticky, balanced moves. Every member heartbeats <group>.member.<id>
// (which partitions it holds); a member is dead once its record is TTL
// older than the newest record (broker timestamps only, no clock skew).
// The lowest live member writes <group>.assignment with compare-and-set;
// the assignment function (assign) is deterministic, balanced
// (partitions/members, the remainder to those already owning most) and
// sticky (only orphaned or surplus partitions move). The KV revision of
// the assignment is the generation, the fence token (Message.Fence).
//
// Handover: a member gives up a partition when the assignment says so:
// it stops pulling, lets running handlers settle (DrainTimeout), then
// publishes that it no longer holds it. The new owner starts only when no
// live member holds the partition, then unpins the consumer (the old
// client's pulls get nothing: checked in TestGroupStaleMemberCannotAck)
// and resets it to its ack floor, so every event not acknowledged comes
// again in stream order before anything newer: per-key order holds across
// a rebalance, at the price of redelivering events acknowledged above the
// floor (at-least-once; an inbox or the fence catches the repeat), and of
// restarting the broker's delivery count of those events.
//
// Lost deliveries: a delivery can go to a pull request its client no
// longer reads (nats.go gives up on a fetch a second after its expiry
// if the server has not ended it, and a request that reached the server
// late is still served); the event would come back only after AckWait,
// behind its key's later events. The runner checks the consumer's
// delivery sequence: on a jump it takes nothing newer, lets what it
// holds run, then resets the consumer to its ack floor, so the lost
// event comes again before the key's later ones, at a handover's price
// (events acknowledged above the floor come again, a parked event's
// backoff and delivery count start over)
// (platform_consumer_lost_delivery_resets_total;
// TestGroupKeepsKeyOrderWhenADeliveryIsLost). Work queues promise no
// order, and many workers share their consumer, so they avoid the loss
// instead: Workers pull through inboxes that live as long as they do
// (claim lanes speaking the pull protocol directly, each request asking
// for exactly the free slots the lane holds), so a request served late
// still reaches them (TestWorkersTakeAJobServedLate; before, such a job
// waited out a lease), and a job beyond a lane's slots (a request
// presumed gone that was not) waits for a slot with its lease renewed
// (TestWorkersHoldJobsBeyondTheirSlots), never unseen in a buffer.
//
// Fencing: NATS does not fence acks. An AckExplicit ack is applied by
// stream sequence whoever sends it (consumer.go processAckMsg ignores the
// delivery it came from), and the pin only governs pulls. So the runtime
// fences itself: a runner settles (ack, nak, dead-letter) only while it
// holds the partition and its member renewed its membership less than
// TTL-Heartbeat ago; a member that cannot renew stops pulling too. The
// residual window (a process paused between the check and the ack) is
// closed by the fence token in the handler's own store.
//
// Failing key: parked (see partitionRunner). Retries are NakWithDelay
// with full-jitter backoff, so the broker counts every attempt and
// nothing blocks a partition while waiting; the attempt limit is the
// consumer's MaxDeliver (groups: 5; queues: MaxAttempts).
//
// Dead letters: see dlq.go for streams and subjects ($DLQ.<stream>.
// <consumer>.<seq>, one message per subject, so one entry per failure).
// Measured on nats-server 2.15.2 (R3 pinned pull consumer): when the
// last attempt's lease lapses with no pull waiting, the broker neither
// drops the event nor emits MAX_DELIVERIES until the next pull request;
// a member taking over resets the consumer instead (the event is retried
// afresh and dead-lettered by the runtime), so either way it reaches the
// DLQ once. platformd runs a router for every topic and queue of the
// platform account (DLQRouters; objects applied later are picked up
// within seconds), so the advisories are routed even when no Member or
// Workers of the object runs one.
//
// DLQ retention and owner: per object in the spec (dlq: {retention,
// owner}, DLQSpec), applied by the Reconciler to the DLQ and advisory
// streams. Default 14 days, or the topic's max_age if longer; an explicit
// retention shorter than 1h or than the topic's max_age is refused (a
// dead letter would expire while its event is still in the topic).
//
// First failure: recorded at the first retry in FirstFailuresBucket
// (create wins, so the earliest), read back by whichever process fails or
// dead-letters the event later (after a crash or a handover), including
// the DLQRouter. NATS keeps no time of a first delivery, and a NAK cannot
// add a header to the stored event, hence the bucket.
//
// Redrive: a redriven event carries Platform-Redrive-Group (the group
// that dead-lettered it); every other group's runtime acks it without
// calling its handler (platform_consumer_redrive_skipped_total), so a
// redrive reaches only the failed group.
//
// Work queues, dropped connection: see WorkerSessionsBucket. Live
// Workers give back (NAK) the jobs of a Workers instance whose session
// lapsed, about SessionTTL (5 s) after it crashed or lost its connection
// instead of a whole lease; the lease stays the fallback.
