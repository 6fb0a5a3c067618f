// Package pgoutbox is the PostgreSQL outbox (schema outboxrelay, embedded
// migrations applied by Migrate). A service enqueues with Enqueue (pgx.Tx)
// or EnqueueSQL (*sql.Tx) inside its own transaction; the relay reads
// through Store.
//
// Several outboxes per database: Open(pool, Options{Schema: "billing_outbox"})
// puts one in its own schema, with its own migrations (Store.Migrate), its
// own events and its own fencing token; enqueue with Store.Enqueue and run
// one relay per outbox, each with its own outboxrelay.Config.Name (lease).
//
// Ordering: rows get a bigint identity (seq). Identity order is not commit
// order under concurrent transactions, so Enqueue first takes a
// transaction-scoped advisory lock on hashtext(topic.key): two transactions
// enqueueing one key are serialised and the second draws its seq after the
// first ends. Per key, seq order is therefore commit order, and a committed
// row is never visible while a lower seq of its key is still in flight.
// The relay reads the queue table unsent (one narrow row per unsent
// event, added by a trigger in the enqueueing transaction, so it becomes
// visible exactly when its event does) rather than reading past a cursor,
// so a row committed late is picked up, never skipped. Across keys there
// is no order (none is promised). Cost: writers of one key wait for each
// other's commit; hash collisions only add waiting.
//
// Marking sent (migrations 0002, 0003): MarkSent deletes the seqs from
// unsent and logs them, with the time, as one row of sent_batches per
// call; the ~1 KB event rows are never updated (an UPDATE of
// events.sent_at rewrote each row and its indexes), and no row is written
// per event (0002's sent held one per event, a third of a mark's database
// CPU). Prune deletes the oldest logged seqs and their events, in small
// batches. Entries of sent (marked before 0003, or by a relay of that
// version during a rolling upgrade) and events marked before 0002 (by
// events.sent_at) are pruned after them.
//
// Fencing: <schema>.fence holds the current relay's token; MarkSent
// deletes only while the token matches, holding a share lock on that row,
// so a newer relay's Fence waits for an in-flight mark and every later
// mark of the old relay is refused with outboxrelay.ErrFenced. Migration
// 0002 sets the token of the former table, <schema>.lease, to the largest
// bigint: a relay built before it (which reads sent_at, and would
// republish every event marked since) is refused at its next mark or
// fence and never publishes again; until then it sees only events that
// are really unsent. Services enqueueing with an older build keep working
// (the trigger queues their events).
package pgoutbox
