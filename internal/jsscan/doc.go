// Package jsscan reads a stream's messages: Range is the platform's one
// ordered range scan (every message from a start sequence to an end, in
// sequence order, read with an ordered consumer in batches), and
// DirectBatch its one batched direct get (the first match of a subject
// and a count of the rest, or the last message of a subject at or below
// a sequence, from the store's per-subject index, served by any current
// replica).
//
// Range's guarantees and the failures it handles:
//   - no fetch waits out its expiry for messages that will not come: a
//     batch asks for no more than the range still holds, and interior
//     deletes or a replica with nothing pending end the batch at once;
//   - a replica that lags the leader does not cut the scan short: when the
//     replica read has nothing more, the stream leader is asked whether it
//     holds anything in the rest of the range (deleted sequences count as
//     gone), and the scan waits for the replica up to maxReplicaLag;
//   - a transient failure (jserr.Transient: a leader moving, no answer)
//     resumes the scan from the next sequence on a new consumer, up to five
//     times in a row.
//
// The messages a scan sees are those stored when it reads them; one
// written after the scan started is seen only if it lies within To.
package jsscan
