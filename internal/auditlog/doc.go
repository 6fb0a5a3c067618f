// Package auditlog is the platform's one audit log format: the
// replicated platform-audit stream of the PLATFORM account, the record
// every admin action appends to it (tenancy's admin operations, quota
// hits and denials; redrive's requests, approvals and runs), and the
// subject a record is filed under.
//
// Guarantees: every writer creates the stream with StreamConfig, so
// whichever creates it first gives it the same subjects, retention and
// replicas; Encode stamps a record without a time with the current UTC
// time and files it under Subject.<tenant, or _ for none>.<action>, so a
// reader filters by tenant and action on the subject alone.
package auditlog
