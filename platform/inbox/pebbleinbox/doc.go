// Package pebbleinbox is platform.Inbox in a Pebble database: the inbox
// row goes into the same synced batch as the effect's writes, so an effect
// commits exactly once per event id; a repeat is skipped and acked; a
// failed effect leaves nothing. ProcessBatch commits many messages with one
// sync. Rows older than the retention are pruned in small batches through
// a time index.
package pebbleinbox
