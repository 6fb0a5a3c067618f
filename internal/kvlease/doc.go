// Package kvlease is the platform's one fenced lease: a single active
// holder among processes that share a JetStream KV bucket, used wherever
// one instance must act alone (an outbox's relay, a tenant's ingest, a
// redrive run).
//
// The protocol, on one key:
//   - Acquire: Create the key (absent or deleted), or Update it at the
//     revision a standby has seen unchanged for a whole TTL (the holder is
//     dead or cut off). The revision the acquisition wrote is the fencing
//     token: a stream's sequences only grow, so a later holder always has
//     a higher token, and a store that remembers the highest token it saw
//     can refuse a stale holder's writes.
//   - Renew: Update at the holder's last revision. A compare-and-set
//     conflict (jserr.WrongRevision, 10071 or 10164) means another process
//     took over: the lease ends at once (ErrLost).
//   - The holder may act only while its last successful write started
//     less than Config.Valid ago (Valid < TTL). A standby needs a whole TTL
//     of its own clock with no revision change, so the old holder has
//     stopped acting before a new one starts. Only durations on each
//     process's own clock are compared, never clocks between machines.
//   - Release deletes the key at the holder's revision, so a standby takes
//     over at its next Tick after a clean shutdown.
//   - Take acquires at once, whoever holds the key: only for a process
//     another fenced write already made the holder (a redrive run claimed
//     on its record); the previous holder's next renewal gets ErrLost.
//
// A Lease is safe for concurrent use; Tick is meant to be called from one
// loop, every TTL/4 or more often.
package kvlease
