// Package principal authenticates the person behind a control API
// request: platformctl signs each state-changing request with the user's
// .creds (--user-creds), and platformd verifies the signature against the
// installation's current accounts before it acts, so the four-eyes rule
// of redrive and group resets compares authenticated users, not names a
// caller typed.
//
// The failure it exists for: every control API caller holds the admin
// credentials (the transport), so a name given in the request (--as) is
// whatever the caller says; one person could request and approve a
// review-required redrive under two names.
//
// Wire format: a signed request's body is an Envelope {"auth": Proof,
// "body": <the request's JSON, base64>}. Proof carries the user JWT, a
// timestamp (Unix nanoseconds), a random nonce and the user's nkey
// signature over Message(subject, timestamp, nonce, sha256(body)).
//
// Guarantees of Verifier.Verify (each failure is ErrUnauthenticated or
// ErrMalformed with a message naming what was wrong; nothing is done):
//
//   - The signature is by the user JWT's subject key, over the full
//     control subject, so a signature cannot be moved to another
//     operation or body.
//   - The JWT is signed by the account identity key or one of its
//     signing keys (including tenancy's per-user scoped keys) of the
//     platform admin account or a known tenant's, as the broker holds
//     that account now (its resolver's account JWT); it is not expired
//     or not yet valid; it is not revoked (the account's revocations,
//     including "*" at suspension; for a platform admin account user,
//     also Config.RevokedOperator: the operator registry) and its tenant
//     is not suspended.
//   - The timestamp is within MaxSkew of the daemon's clock, and the
//     (user, nonce) pair was not seen before in that window: a bounded
//     in-memory cache per daemon (when it is full of live entries new
//     requests are refused rather than a nonce forgotten), then
//     Config.Record installation-wide (platformd: a replicated KV bucket,
//     platform-nonces, keys kept 5 minutes; full or unreachable, the
//     request is refused).
//
// The principal is user@tenant, or user@platform for the admin account,
// the same name the web console gives (internal/console Session).
//
// Platform operators (operators.go) are named users of the admin account:
// platformctl operator add|list|revoke, served by platformd, which signs
// them with the admin account's signing key and records them in the KV
// bucket OperatorBucket. A revoked operator's key is refused by the
// Verifier from the moment it is recorded (Config.RevokedOperator) and
// by the broker once platformd pushed the admin account JWT with the
// revocation. The bootstrap admin of trust.json is not in the registry
// and cannot be revoked.
//
// Not guaranteed: a principal is re-checked (revocation, suspension)
// against accounts cached for Config.CacheTTL (1 s), so a revocation takes
// effect within about a second.
package principal
