// Package redrive is dead-letter review and redrive: browse the DLQs of
// topics and queues (owner, depth, oldest age, entries grouped by error
// fingerprint), then request → approve → run a redrive that sends a
// sample first, holds a rate, and records everything in the audit log.
//
// The failure it exists for: a DLQ nobody owns, and a redrive that
// charges a card twice (sent blindly, twice on a double click, or with
// entries that failed after anyone looked).
//
// Guarantees:
//   - A request's selection is frozen when it is made (an explicit list of
//     DLQ sequences), so entries that fail after the review are never sent.
//   - Every state transition is a compare-and-set on the record's KV
//     revision: of two approvers or two clicks on run, exactly one wins
//     (the other gets ErrConflict); at most one run per DLQ at a time.
//   - Four eyes: on a topic with review: required the requester cannot
//     approve (ErrForbidden), nothing runs unapproved, and both people are
//     authenticated principals, never names taken from a request field.
//   - Each redriven event carries Nats-Msg-Id redrive:<request>:<dlq seq>
//     and its first event id (Platform-Original-Msg-Id), so a retried or
//     adopted run is deduplicated by the stream, and beyond its window by
//     a consumer inbox; Platform-Redrive-Group limits it to the group that
//     dead-lettered it.
//   - An entry leaves the DLQ only after its publish is acknowledged; a
//     run that says completed has emptied its selection. A runner that
//     stops renewing the run's lease (internal/kvlease) is replaced by
//     another instance, which continues from the last fenced checkpoint.
//   - A sample is sent first and watched; above MaxFailureRate the run
//     pauses itself and says why. The rate is held by a token bucket.
//   - Every request, decision, run, outcome and batch sent is appended to
//     the audit stream with who and why.
//   - Per-user access (Service.For) refuses what the user may not consume
//     or publish to, and rates above its tenant's quota; a tenant's Service
//     sees only its own account's DLQs.
//
// Detail (the send pipeline, deletion batching, checkpoints, the wire
// path, tenant scope, metrics): docs/design/redrive.md and
// docs/design/redrive-deletion.md.
package redrive
