// Package console is the web console of dead-letter review and redrive,
// served by platformd under /console/ on its HTTP port: DLQ list (owner,
// depth, oldest age, retention warning), entries and one entry (payload,
// headers, reason, class, attempts, original stream/seq, tenant, failure
// times), fingerprint groups, the redrive request form, the request list
// with approve / reject / run / pause / resume / cancel, live run progress
// (count, rate, ETA; polled by a few lines of JavaScript) and the audit
// history. Plain server-rendered HTML (html/template) with its CSS and JS
// embedded; no build step.
//
// Guarantees:
//
//   - Identity is authenticated by the broker. A user signs in with their
//     NATS .creds file; the console connects to the local node with it
//     and only if the server accepts the connection (signature chain to
//     the operator, not revoked, not expired, tenant not suspended) takes
//     the principal from that user JWT: its account decides the scope
//     (the PLATFORM account: a platform operator, who may look at every
//     tenant; a tenant's account: that tenant only; any other account is
//     refused) and its name plus the scope name the principal
//     (alice@harbor-retail, admin@platform). That principal is the
//     requester, approver and actor of every redrive action: never a form
//     field. Four eyes therefore means two different authenticated users.
//   - A tenant's operator sees only that tenant's DLQs, requests and audit
//     records: every page and action runs on the redrive service of the
//     tenant's own account (another tenant's DLQs are not there), and a
//     request naming another scope is refused with 403 and a message
//     saying why.
//   - Within its tenant a user sees and does only what its own
//     permissions allow (Config.Access, redrive.Access; every page and
//     action goes through redrive.Service.For): the DLQs (entries,
//     payloads, headers, groups, previews) of the topics, queues and
//     groups it may consume, the requests whose every entry it may see,
//     and redrives into what it may publish to, at most at its tenant's
//     publish-rate quota. Anything else is refused (403) saying what to
//     grant, and nothing is read or changed.
//   - Request bodies are bounded before anything reads them
//     (MaxLoginBytes on /console/login, MaxFormBytes elsewhere; 413
//     beyond) and forms are parsed in memory within that bound: nothing
//     is spooled to a temporary file.
//   - A user who no longer checks out is signed out at their next
//     request: every request re-checks the session's user against the
//     installation as it is now (internal/principal.Verifier: revoked,
//     expired, tenant suspended, signing key removed; the result cached
//     per user for about a second), and a user who fails is signed out
//     with a message saying why (401); the action they posted is not
//     done.
//   - Sessions are a cookie (HttpOnly, SameSite=Strict, Path=/console/,
//     Secure when the request came over TLS)
//     holding the principal, signed with HMAC-SHA256 under
//     Config.SessionKey (platformd derives it from the installation's
//     trust, so every platformd of the installation accepts a session
//     another one issued, and a restart signs nobody out) and valid for
//     Config.SessionTTL. Every mutating request is a POST carrying a CSRF
//     token bound to the session; without it the request is refused
//     (403) and nothing changes. The cookie expires with the user JWT if
//     that comes first.
//   - Logout is installation-wide. A session ended before its expiry
//     (logout, or a user signed out because they no longer check out) is
//     forgotten at once by the platformd that ended it and recorded in
//     Config.Ended (platformd: the replicated KV bucket
//     EndedSessionsBucket, keyed by a hash of the session id, with the
//     installation's replicas and a TTL of the session TTL, so a record
//     outlives the session it ends). Every authenticated request on every
//     platformd reads that record (a direct get, not a cache), so a copy
//     of the cookie replayed on another platformd is refused within the
//     bucket's replication lag.
//
// Failures handled: a platformd that cannot read Config.Ended refuses
// the request with 503 and a message saying why, and keeps the cookie
// (fail closed: it neither accepts a session it cannot check nor ends
// one that may be valid); a logout is still served (ending a session is
// safe either way). A logout whose record cannot be written
// still ends the session on the platformd that served it; the record is
// retried in the background until it is written or the session expires,
// and until then the other platformds accept a replayed copy of the
// cookie (logged as an error).
package console
