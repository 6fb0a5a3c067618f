// Package inboxtest is the contract every platform.Inbox backend must
// pass: Run(t, harness) from a backend's tests holds PostgreSQL
// (platform/inbox/pginbox) and Pebble (platform/inbox/pebbleinbox) to the
// same behaviour, as outboxrelay/outboxtest does for the outbox stores.
//
// It checks, each with counted outcomes (effects committed, rows recorded,
// acks):
//   - the first delivery of an event runs its effect, records the event
//     and acks; a repeat is skipped (InboxDuplicate) and acked; a redriven
//     copy (new Nats-Msg-Id, Platform-Original-Msg-Id = the event) is a
//     repeat; a message without an event id is refused (ErrNoEventID)
//     with no effect and no ack;
//   - a failed effect leaves neither its writes nor a row and is not
//     acked; the retry applies the effect once;
//   - N concurrent deliveries of one event id apply the effect once: one
//     InboxProcessed, N-1 InboxDuplicate, N acks;
//   - two consumers of one event each apply it once;
//   - a retention shorter than the DLQ retention is refused
//     (ErrInvalidInboxConfig) with an explanation naming both and the
//     minimum to set;
//   - pruning deletes, in batches of PruneBatch, exactly the rows older
//     than its cutoff while deliveries go on concurrently, and nothing at
//     the configured retention when every row is recent; a pruned event
//     is no longer seen;
//   - the newer-version helper applies versions 5, 7 and skips 3, 5, 6
//     after 7 (late and redriven events);
//   - ProcessBatch, when the backend has one: outcomes, errors and acks per
//     message for new ids, a repeat from before and a repeat within the
//     batch, in a batch where no effect fails and in one where one does
//     (only its message fails, with no row and no effect).
package inboxtest
