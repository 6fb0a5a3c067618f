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
// The relay selects unsent rows (sent_at IS NULL) rather than reading past
// a cursor, so a row committed late is picked up, never skipped. Across
// keys there is no order (none is promised). Cost: writers of one key wait
// for each other's commit; hash collisions only add waiting.
//
// Fencing: <schema>.lease holds the current relay's token; MarkSent
// updates only while the token matches, holding a share lock on that row,
// so a newer relay's Fence waits for an in-flight mark and every later mark
// of the old relay is refused with outboxrelay.ErrFenced.
package pgoutbox
