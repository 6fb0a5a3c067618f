// Package region runs the platform across independent regions (each its
// own cluster and JetStream domain, joined by a leafnode link): mirroring
// of topics, failover and failback, and the residency policy with what
// enforces it (the gate, the guard, the link's deny list, the report).
// It imports platform; platform never imports it, so a service using
// platform links no broker.
//
// Guarantee: resident data never leaves its region. A topic, queue, KV or
// object-store bucket declaring platform.residency, its DLQ streams and
// every stream copying them (mirror or source, transitively) are
// resident. No mirror, source, republish, redrive, failover or JetStream
// API read across the link carries them out:
//   - CheckStream refuses such a copy before anything is created
//     (ErrResidency, naming the topic, its region and the region reached);
//   - the gate refuses it at the JetStream API request itself (err_code
//     GateErrCode), in front of every region's stream create and update;
//   - the guard deletes or trims what got past the gate (a node restarted
//     moments ago, a source whose region did not answer) within
//     milliseconds of its advisory, and deletes push consumers whose
//     deliver subject the link carries;
//   - the link's deny list (LinkDeny, LinkTable) carries no resident
//     subject and no JetStream API request naming a resident stream but
//     configuration and state reads, so a copy that exists for those
//     milliseconds never holds a resident event.
//
// Every refusal is recorded in the region's AuditStream and counted.
//
// Failure handled: a region going down. A non-resident topic mirrored to
// another region fails over to it (Regions.Failover): the mirror is
// promoted, and each group resumes at its position translated exactly
// (mirrors keep the origin's sequences 1:1); the report states the lag
// and the duplicate window the group must absorb. Failback reverses it
// once the region answers, copying the writes made meanwhile back by
// event id. A resident topic does not fail over (there is no copy):
// DegradeMode, producers keep writing to their outbox until the home
// region returns; nothing is lost, delivery is late by the outage.
//
// Invariants:
//   - The first Region of Regions is home, where topics without
//     residency live; each region is reached on its own connection,
//     never through the link.
//   - Residency is followed through at most 8 mirrors or sources; a
//     deeper chain is refused as unknown.
//   - Nothing is deleted before its events exist in the region that
//     keeps them; a failback interrupted before its last step can be run
//     again and finishes.
//   - A deny list never shrinks because a region is unreachable: a peer
//     that cannot be read keeps its last known residents.
//   - Not covered: a holder of the platform account's credentials in the
//     region who reads resident events and publishes them elsewhere.
package region
