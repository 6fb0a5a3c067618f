// Package pebbleoutbox is the outbox in a Pebble database the service also
// keeps its own data in: Enqueue adds the event to the service's
// *pebble.Batch, which is committed with Store.Commit (or Store.Update).
//
// Ordering: sequence numbers come from memory in Enqueue; a batch may
// commit after a later one. Until its batch is committed (or discarded)
// every record at or above its lowest seq is held back from the relay, so
// records become visible in seq order and per-key order is commit order.
// A batch holding events must therefore go through Store.Commit or
// Store.Discard; one committed with b.Commit would hold the relay back.
//
// Single writer: exactly one Store per database (Pebble's directory lock
// keeps other processes out); the relay runs in the same process. The
// fencing token is stored in the database (key <prefix>f) and loaded by
// Open, so after a restart a relay holding an older token is still
// refused.
package pebbleoutbox
