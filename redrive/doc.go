// Package redrive is dead-letter review and redrive: browse the DLQs of
// topics and queues (owner, depth, oldest age, entries, groups by error
// fingerprint), then request → approve → run a redrive that sends a
// sample first, holds a rate, and records everything in the audit log.
//
// The failure it exists for: a DLQ nobody owns, and a redrive that
// charges a card twice (sent blindly, twice on a double click, or with
// entries that failed after anyone looked).
//
// Guarantees and invariants:
//
//   - A request's selection is frozen when it is made: resolved to an
//     explicit list of DLQ sequences (stored compactly under sel.<id> in
//     the replicated KV bucket platform-redrive), so entries that fail
//     after the review are never included.
//
//   - Every state transition (requested → approved | rejected → running →
//     paused | completed | cancelled | failed) is a compare-and-set on the
//     record's KV revision, re-checked against the latest state on every
//     retry: of two approvers, or two clicks on run, exactly one wins and
//     the other gets ErrConflict. At most one run per DLQ at a time (a
//     lock key, also compare-and-set), since two selections may overlap.
//
//   - Four eyes: a topic marked review: required (platform.TopicSpec
//     Review) refuses approval by the requester (ErrForbidden) and refuses
//     to run unapproved; other DLQs may be run by the requester directly.
//     The principal is the caller's authenticated identity, user@tenant
//     or user@platform: in the web console (internal/console) the user
//     the broker authenticated from their .creds; through the control
//     API the user whose .creds signed the request (platformctl
//     --user-creds; platformd verifies it with internal/principal:
//     signature, account, expiry, revocation, suspension, timestamp,
//     nonce), and a tenant's user acts in its tenant's scope only.
//     Request.Authenticated records that the requester was authenticated
//     (set by the server, never taken from a client). On a review:
//     required DLQ platformd refuses an unsigned request, approval, run
//     or resume, and an approval of a request whose requester was not
//     authenticated, so four eyes means two authenticated users on both
//     paths. Elsewhere an unsigned control request still works and is
//     recorded as unauthenticated:<name> (the deprecated --as).
//
//   - Each redriven event is published with Nats-Msg-Id
//     redrive:<request>:<dlq seq> (MsgID) and its first event id in
//     Platform-Original-Msg-Id: a retried or adopted run is deduplicated
//     by the destination stream within its duplicate window, and beyond
//     it by a consumer inbox keyed on the original id. That id also links
//     the event to its request and DLQ entry (RedriveOf); no header
//     repeats it (a redriven event carries about 90 bytes fewer than
//     with the Platform-Redrive-Request and -Dlq-Seq headers earlier
//     versions set, and which RedriveOf still reads). It also carries
//     Platform-Redrive-Group, the group that dead-lettered it: the
//     consumer runtime of every other group of the topic acknowledges it
//     without handling it (platform/consumer_redrive.go), so a redrive
//     reaches only the group that failed.
//
//   - The send path is a pipeline (run.go, publish.go, deleter.go):
//     entries are read ahead from the DLQ (a pull consumer: ephemeral,
//     in memory, no acks, R1 on one of the DLQ's replicas, whose gaps
//     and replica lag are checked against the leader's view), published
//     asynchronously with a bounded window (core NATS with the run's own
//     reply subjects; the Nats-Msg-Id is in the header), and their acks
//     awaited in order (a failed publish is retried with the same id, an
//     unanswered one once ackTimeout has passed since it was published; a
//     refusal is final). The reads and publishes go over a connection of
//     the service's own, shared by its runs and open while one runs, with
//     the credentials of the service's (internal/wire; wirepath.go): an
//     entry's header block stays bytes from the read to the publish,
//     filtered line by line, where nats.go decodes a map per message and
//     encodes it again. Where wire cannot connect as
//     the service does (TLS, a password or token, a JetStream domain, a
//     tenant at its connection limit), and while its connection is down,
//     the run uses nats.go (an ordered consumer, PublishMsg); the events
//     are the same. Config.OwnConn counts that connection (platformd
//     counts it among the platform's connections of a tenant's account). An entry is deleted from the DLQ only after its
//     publish is acknowledged, in batches: one purge below a contiguous
//     stretch of acknowledged entries when nothing else is left beneath
//     it, one delete per entry otherwise. The run's position (Progress
//     Next, the index in the frozen list below which everything was
//     acknowledged and deleted) advances only past deleted entries, so a
//     run that says completed has emptied its selection from the DLQ,
//     and an entry acknowledged but not deleted before a crash is sent
//     again (same id) and deleted by the next runner; a retried run skips
//     entries already gone. The position is written every Checkpoint,
//     fenced by an epoch; a run whose runner did not renew the run's
//     lease (internal/kvlease) for LeaseTTL (it crashed) is adopted by
//     another instance and continues from it. Deletions are gathered (a purge costs the broker about the
//     same whatever it removes): for up to 100 ms while few entries come,
//     up to a second or 32768 entries at high rates, so a crash re-sends
//     (same ids) at most about a second of events beyond the checkpoint;
//     checkpoints are written in the background, off the send path. A
//     pause or cancel halts the sender before its next publish (a local
//     signal, or a watch on the record for a runner elsewhere), and Pause
//     returns once the in-flight acks have landed.
//
//   - Sample first: SampleSize events are sent, then their outcome is
//     watched for SampleWindow (did they reach a DLQ again? counted from
//     the watched DLQ by the request in the entry's event id, RedriveOf). Above MaxFailureRate
//     the run pauses itself and says why; the rate is also watched during
//     the rest of the run. The rate is held by a token bucket
//     (golang.org/x/time/rate) that starts empty when the first entry is
//     ready to send (not when the runner starts: its first reads of the
//     DLQ may take a second on a loaded cluster, which the bucket, 250 ms
//     deep, would otherwise make up in one burst), and Progress.Sending,
//     from which the reported rate comes, starts then too.
//
//   - Every request, approval, rejection, run, pause, resume, adoption,
//     outcome, and every batch of sent events (linking each DLQ seq to
//     its redriven message id and stream seq; stored compactly as ranges,
//     SentLinks format 2, the msg id derived as redrive:<request>:<dlq
//     seq>; History returns every sent record, old or compact, as []Link)
//     is appended to the platform-audit stream with who and why
//     (tenancy's record shape).
//
//   - Per-user access (access.go): every path acting for a user (the
//     web console, the control API) uses Service.For(Access), whose Guard
//     refuses (ErrForbidden, nothing read or changed) DLQs and entries of
//     what the user may not consume, requests with an entry it may not
//     see, redrives into what it may not publish to, and rates above its
//     tenant's publish-rate quota (ErrInvalid; no rate asks for the
//     quota). The Access comes from the authenticated principal and the
//     tenant's user record, never from a request field.
//
//   - Tenant scope: a Service with Config.Tenant serves the DLQs of that
//     tenant's account over a connection in it (platformd mints a user
//     of the account; tenancy stores topic NAME as stored.NAME, and DLQs
//     are named without that prefix), while its requests live in
//     TenantBucket(tenant) and its audit records (Tenant set) in
//     platform-audit, both in the PLATFORM account where the tenant's
//     users cannot reach them. Another tenant's DLQs are not in the
//     account, so they can be neither seen nor redriven; History shows the
//     tenant's records only. A redrive in a tenant account publishes to
//     stored.<subject> directly: the request's rate holds (not the
//     ingest's), and a tenant user's Access caps it at the tenant's
//     publish-rate quota.
//
//   - Metrics: Collector labels every series tenant="" (the admin
//     account); TenantCollector exports tenant accounts' DLQs as
//     tenant=<name> over a service-user connection per tenant.
package redrive
