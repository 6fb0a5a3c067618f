// Package tenancy makes tenants of the platform: each tenant is a NATS
// account of its own, with users, permissions derived from the topics,
// queues and groups they name, quotas (the server-enforced ones from the
// account JWT, and a publish-rate quota the platform enforces), a
// reversible suspension, usage figures and an audit log.
//
// Guarantees:
//   - Identity is the authenticated account. A tenant's events reach its
//     streams only through the platform's ingest, which strips every
//     Platform-* header a client sent and stamps Platform-Tenant; users
//     may publish to NAME.<key> and never to the stored subjects.
//   - A user does only what its permissions name: its --pub topics and
//     queues, reads of its --sub topics' streams, pulls and acks of the
//     consumers of its groups and queues through the JetStream gate
//     (deliveries go only to an inbox), its own inbox prefix. Consumers
//     are the platform's; every consumer or stream change in a tenant's
//     account is audited, whoever made it.
//   - Quotas hold in total, however many daemons run: the account JWT's
//     limits are enforced by nats-server (connections counted with the
//     platform's own reserved), the publish rate by exactly one active
//     ingest per tenant (a fenced internal/kvlease lease), which rejects
//     or throttles over the quota and loses no acknowledged publish.
//   - Every change is validated, pushed to every node, then written to
//     the replicated registry with compare-and-set: a failed push changes
//     nothing, a failed write pushes the old JWT back, a lost race is
//     ErrConflict. Every change and every refusal the servers report is
//     appended to the audit stream.
//   - Usage is cluster-wide and says when a node's figures are missing
//     (Usage.Partial) rather than passing the rest off as the whole.
//
// Failures handled: a node down during a change (Start pushes every JWT
// again), an ingest's daemon crashing (a standby takes the lease over
// after LeaseTTL; a clean stop hands over at the next heartbeat), a
// flooding tenant (held at its own connections), a permission change on
// live connections (they are closed and reconnect with the new rights).
//
// Not guaranteed (yet): a lease holder cut off from the KV leader keeps
// its ingest up to LeaseTTL-LeaseInterval after its last renewal, and a
// long GC pause or a wildly different clock rate could overlap two
// ingests briefly (the republish carries no fencing token). Permission
// violations are audited only on nodes whose logger WatchViolations
// wrapped, and depend on the wording of nats-server's log line (tested
// against 2.15.2). The actor of a change is what the admin caller says.
//
// The detail (keys and the registry, the ingest step by step, sharing,
// users and scopes, suspend and delete, audit and usage) is in
// docs/design/tenancy.md; the gate in docs/design/tenancy-gate.md.
package tenancy
