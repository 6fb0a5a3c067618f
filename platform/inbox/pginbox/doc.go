// Package pginbox is platform.Inbox in PostgreSQL (schema platform_inbox,
// embedded migrations): the inbox row (consumer, event id) is inserted in
// the service's transaction together with the effect, so an effect commits
// exactly once per event id; a repeat is skipped and acked; a failed effect
// leaves no row. Rows older than the retention (validated against the DLQ
// and topic retention) are pruned in small batches.
package pginbox
