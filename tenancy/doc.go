// Package tenancy makes tenants of the platform: each tenant is a NATS
// account of its own, with users, permissions derived from the topics,
// queues and groups they name, quotas (the server-enforced ones from the
// account JWT, and a publish-rate quota the platform enforces), a
// reversible suspension, usage figures and an audit log.
//
// # Accounts, keys and the registry
//
// A tenant's account JWT is signed by the operator's signing key (never its
// identity key; the operator is StrictSigningKeyUsage) and pushed to every
// node on $SYS.REQ.CLAIMS.UPDATE as the system user; every node's full
// resolver replies and stores it, and any refusal is an error. The account
// gets its own signing key, which signs its users; the identity key is
// discarded after creation. The registry of tenants (spec, quota, state,
// account key, users, objects, revocations) is the JetStream KV bucket
// platform-tenants in the PLATFORM account, replicated like the platform's
// streams (R3 on three nodes), written with compare-and-set on the
// revision. The signing seed is stored sealed (AES-256-GCM under a key
// derived from trust.json, bound to the account key). Start pushes every
// tenant's JWT again, so a node that was down during a change catches up.
// Order of every change: validate, push the JWT, then write the registry;
// a failed push changes nothing, a failed write pushes the old JWT back.
//
// # Quotas
//
// Connections, payload size, and per replica tier (R1, R3) memory and disk
// storage, streams, consumers and max ack pending are account JWT limits:
// nats-server enforces them, and a change is pushed and applies to live
// connections. The publish rate is not a NATS limit (nats-server issues
// 4891, 346), so every tenant publish passes the platform's ingest.
//
// nats-server counts every connection of an account, the platform's own
// too (each daemon's ingest runtime, RuntimeConns connections, and
// service users: redrive, its runs' own connection, DLQ metrics; each
// node's pull gate). The account's limit is therefore the connection
// quota plus Config.PlatformConns (PlatformConnsPerDaemon per daemon,
// GateConnsPerNode per node), so those never
// take the tenant's slots, and usage reports the tenant's own connections.
// While the platform holds fewer than its reservation (a connection
// reconnecting, a node restarting, a service not connected), the servers
// would let the tenant open that many more than its quota, and a platform
// connection coming back would be refused. So each connect to a tenant's
// account is followed, about 250 ms later, by a count of the tenant's own
// connections across the cluster (users not signed by the account's
// signing key: platform users are, tenant users have scoped keys), and
// the newest beyond the quota are closed (a quota.hit audit record each);
// see connquota.go.
//
// # The ingest: identity and publish rate
//
// Inside a tenant's account, topic NAME is stored in the stream of
// StoredName(NAME) ("stored.NAME", stream "stored_NAME"); queues likewise.
// Users may publish only to NAME.<key> (topics) and NAME.> (queues) and
// never to stored.>; no stream listens on NAME.*. The only subscriber there
// is the ingest: a platform-operated user of the tenant's account (one per
// daemon, in queue group platform-ingest). It takes events on a
// connection of its own speaking the NATS protocol directly
// (internal/wire): each event is handled as a slice of the read buffer,
// and the republishes of one read leave in one write, so the hop costs
// the servers one more delivery and publish but costs no copy, header
// map or goroutine hand-off per event. Its JetStream requests use a second
// connection (nats.go). For each event it
//
//  1. applies the tenant's token buckets (events/s and bytes/s; burst 1/10
//     of a second, so no one-second window admits more than 1.1x the
//     quota and a briefly stalled ingest does not admit less). Policy
//     reject: over the quota the publisher gets, on its reply subject, a
//     JetStream-shaped error {"code":429, "err_code":10429}
//     (jetstream.Publish returns a *jetstream.APIError
//     with Code 429; nats req prints it). Policy throttle: the event waits
//     in a bounded queue (two seconds of quota, at least 256 events, at
//     most 16384 events and 64 MiB) until the bucket allows it, so its
//     ack is delayed: an acknowledged publisher (jetstream.Publish,
//     PublishAsync with its bounded window, nats pub --jetstream, nats
//     req) slows to the quota and loses nothing. A flooding tenant is thus
//     held back at its own connections (its publishers stop at their
//     in-flight window), not refused and immediately sending again; that
//     keeps its flood from costing other tenants CPU. An event that finds
//     the queue full is refused like reject (the publisher sees the 429).
//     Nothing is buffered without bound.
//     Queued events are forwarded in small batches (the worker waits at
//     least 5 ms, then sends what the bucket allows back to back), so a
//     tenant held at its quota costs the servers per batch, not per
//     event. An active ingest also places the leader of each new (empty)
//     topic or queue stream on its own server (best effort, at most 1 s),
//     so the republish crosses no route. The ingest never blocks on an
//     event (it forwards, queues or refuses at once), so events wait in
//     the server's buffer for its connection only while it is starved of
//     CPU; past nats-server's limit for that buffer (max_pending, 64 MiB)
//     the server drops them and closes the connection as a slow consumer
//     (nats-server counts it), and the ingest reconnects and subscribes
//     again.
//     Fire-and-forget publishes (core NATS, no reply subject: nats pub,
//     nc.Publish) cannot be slowed by NATS: nats-server has no end-to-end
//     flow control to a subscriber, only a producer stall of 2-5 ms per
//     read when the subscriber's outbound buffer is over half full, after
//     which it drops messages to (and closes) a slow consumer. So beyond
//     the queue they are lost; each one is counted (usage Dropped, metric
//     platform_tenant_publish_dropped_total) and a quota.hit is
//     audited. Use acknowledged publishes for no loss.
//  2. removes every Platform-Tenant header the client sent (any case) and
//     sets Platform-Tenant to the tenant's name (the other header lines
//     are kept as sent, repeated keys included; the block's first line is
//     NATS/1.0, without any status a client put there);
//  3. republishes to stored.<subject> with the original reply subject and
//     headers (Nats-Msg-Id included), so the stream's ack or error goes
//     straight back to the publisher: nats pub, nats req, nats.go
//     jetstream.Publish/PublishAsync and platform.Publisher all work.
//
// Identity comes from the principal: an event can only reach a tenant's
// ingest by being published by a connection that authenticated as a user
// of that tenant's account (accounts share no subjects; a tenant account
// has no imports or exports but the shares below, which carry stored
// events from owner to reader and never reach an ingest). The stream holding it lives in that
// account, so the account is the identity, and the stamped
// Platform-Tenant header carries it for consumers and the platform's
// services (DLQ, redrive, audit); a header supplied by a client never
// survives.
//
// Cluster-wide: exactly one ingest per tenant is active in the cluster,
// whatever node the publishers use and however many daemons run, so the
// quota holds in total. Each manager (one per daemon) runs a standby
// runtime for every active tenant; the holder of the tenant's lease in
// the KV bucket platform-ingest-leases (PLATFORM account, replicated) is
// the only one subscribed. The holder renews it every LeaseInterval (1s)
// with compare-and-set on the revision it wrote, and stops subscribing
// when a renewal fails with a wrong revision or has not succeeded for
// LeaseTTL-LeaseInterval; a standby takes the lease over (CAS) once it
// has seen the same revision for LeaseTTL (3s, measured on its own clock,
// so host clocks need not agree). A manager that closes, suspends or
// deletes a tenant releases the lease and a standby takes over at its next
// heartbeat (about 1s); a crashed one is replaced within about 4s.
// Publishes during a handover get no responders (jetstream.Publish
// returns an error the publisher retries), and one routed to the old
// holder's node just as it unsubscribes gets no reply at all (core NATS
// drops a message whose queue group left the node it was routed to): the
// publisher's timeout, then its retry. Retries carry the event's
// Nats-Msg-Id, so none is stored twice. The heartbeat also applies
// changes made through other daemons (new tenants, topics, quotas,
// suspensions). Rate changes apply to the next event.
//
// # Sharing between tenants
//
// A topic is shared only by an explicit, platform-managed private stream
// export (the owner's stored.TOPIC.*, token required) and import (an
// activation token naming the reader's account, signed by the owner's
// signing key) under shared.OWNER.TOPIC.*; see share.go. Shares are
// recorded in both tenants' registry records and in the audit stream, and
// listed by `platformctl tenant shares`. Live events only; nothing else
// of the owner's account is exported.
//
// # Users and permissions
//
// A user is allowed exactly: publishing to the topics and queues given
// with --pub; for --sub topics, JetStream API calls on that topic's stream
// only (info, consumers, direct get, acks); for a queue, pulling and acking
// its "workers" consumer; for a group, its partition consumers; and
// subscribing to its own inbox prefix _INBOX_<user> only (so one user
// cannot read another's replies or pulled events). Credentials are written
// 0600 in the jwt.FormatUserConfig format the nats CLI and nats.go read.
//
// Each user's JWT is signed by a scoped signing key of its own (the seed
// is discarded) and carries no permissions: they are the scope's template
// in the account JWT. UpdateUser (platformctl user update) changes them by
// pushing the account; the user keeps its .creds. nats-server (2.15)
// cannot swap a live JWT connection's permissions: when a scope changes it
// closes that user's connections (AuthenticationViolation) and clients
// reconnect by themselves with the same creds and the new permissions.
// A connection that reconnects to a server while that server applies the
// update can be missed by it and keep the old permissions, so once every
// server has the change the account is pushed twice more (the scope
// marked, then as stored), closing the user's connections again.
// Users whose JWT carries their permissions (no scope key) cannot be
// updated this way: revoke and add them again.
//
// # Suspend, revoke, delete
//
// Revoke adds the user's key to the account's revocations and pushes it:
// the servers close its connections at once and refuse it afterwards.
// Suspend revokes every user issued until now ("*") and sets the
// connection limit to 0, and stops the ingest; streams, users and quota are
// kept. Resume removes both. Delete refuses while the tenant has topics or
// queues unless purge, which deletes them first; the account is left in
// the resolvers fully revoked with no connections allowed.
//
// # Audit and usage
//
// Every change (actor, action, before, after, time) is appended to the
// replicated stream platform-audit, and so are: publish-rate hits (at
// most one record per tenant per 10 s); refused connections of tenant
// users ($SYS.SERVER.*.CLIENT.AUTH.ERR: revoked, suspended, over the
// connection limit; one manager per event, a queue subscription); and
// per-subject permission violations. nats-server publishes no advisory
// for those (it sends the client -ERR 'Permissions Violation ...' and logs
// "Publish Violation - Subject ..." with the connection's account and user
// keys), so WatchViolations wraps each embedded node's logger and audits
// auth.denied naming tenant, user, operation and subject (at most one
// record per tenant, user, operation and subject per 10 s; every one is
// counted).
//
// Usage is cluster-wide: every manager answers platform.tenancy.stats
// with its counters (ingest: accepted, throttled, rejected, dropped;
// denials; deliveries to the tenant's closed connections) and Usage sums
// the replies (gathered until 150 ms pass without one, 1 s at most; a
// manager that does not answer in time is missing), with every node's
// account statistics (connections), the deliveries to the tenant's open
// connections (every node's connection list) and JetStream account info.
// Messages out are those delivered to the tenant's own connections only:
// not to the platform's (the ingest takes every event), nor to streams or
// between replicas, which the servers' account statistics also count
// (see watchDisconnects). Counters start at zero when a daemon starts.
// A node that does not answer (down, or slower than 500 ms for its
// statistics, 1 s for its connection list) is missing from the
// connections and messages out; Usage.Partial then names the gap (and
// storage not read), rather than passing the rest off as the whole.
// Collector exports them labelled by tenant, with
// platform_tenant_usage_partial; every daemon exports the same cluster
// totals (aggregate with max, not sum).
//
// Resume returns once a probe sent through every node of Config.URL is
// answered by the tenant's active ingest (bounded by ServingTimeout), so
// a publish made right after it is taken.
//
// # Not guaranteed (yet)
//
// A lease holder cut off from the KV leader keeps its ingest up to
// LeaseTTL-LeaseInterval after its last renewal; a standby cannot take
// over before LeaseTTL, but a long GC pause or a wildly different clock
// rate could still overlap two ingests briefly (no fencing token on the
// republish). Permission violations are audited only on the nodes whose
// logger WatchViolations wrapped (platformd wraps its embedded nodes at
// start; a node restarted in-process afterwards is not wrapped again),
// and the audit depends on the wording of nats-server's log line (tested
// against 2.15.2). The actor
// of a change is what the admin caller says (all admins share the admin
// credentials).
package tenancy
