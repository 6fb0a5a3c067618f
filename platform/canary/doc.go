// Package canary measures whether each consumer group is processing
// accepted work, rather than inferring it from offset lag: platformd's
// Monitor publishes canary events into every topic and queue and reads
// how far each group's ack floor has moved past them. It imports
// platform, never the reverse.
//
// Guarantee: platform_canary_age_seconds{topic,group} is, within one check
// period, how long ago the newest canary was published that the group has
// processed on every partition: its partition consumer's ack floor reached
// the canary's stream sequence. A group stuck on one event keeps a small
// lag but its ack floor stops, so its age grows past the tolerance; so
// does a group with no member running or one that cannot fetch. In a queue
// a canary counts once a worker claimed and acked it.
//
// Every Config.Interval the Monitor publishes one event per partition of
// every topic (and one job per queue) that does not opt out, with header
// platform.CanaryHeader: true and a Nats-Msg-Id naming the slot, so
// several platformd processes store one canary per slot. The consumer
// runtime acks canaries without calling the handler.
//
// Failure handled: a Monitor that restarts (or another platformd's) has
// no memory of the canaries published; it finds the newest canary at or
// below each ack floor in the stream, and reports a lower bound
// (Age.LowerBound) when retention or compaction removed it.
//
// Invariants and limits: canaries are ordinary stored events (they count
// in sizes, pending and reset estimates; a compacted topic keeps the
// latest as key Key). A consumer not built on the platform's runtime
// must ack messages whose platform.IsCanary is true without processing
// them. Tenant canaries (NewTenant) bypass the tenant's ingest and quota.
// Details: docs/design/canaries.md.
package canary
