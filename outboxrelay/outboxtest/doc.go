// Package outboxtest is the contract every outboxrelay.Store backend must
// pass: Run(t, harness) from a backend's tests holds PostgreSQL
// (outboxrelay/pgoutbox) and Pebble (outboxrelay/pebbleoutbox) to the same
// behaviour, the way Watermill's pubsub/tests suite does for its backends.
//
// It checks: enqueue validation (an empty id or topic, or a key of more
// than one subject token, is refused with outboxrelay.ErrInvalidEvent and
// nothing of the transaction is written); Unsent returns records in Seq
// order, per key in commit order, honouring limit and the skip list (the
// limit counts returned records); MarkSent hides records from Unsent and Stats;
// lease fencing (an older token can neither Fence nor MarkSent, and a
// refused MarkSent marks nothing); Prune deletes sent records only, older
// than its cutoff, at most limit per call.
package outboxtest
