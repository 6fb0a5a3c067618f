// Package inbox measures consumption through the Pebble and PostgreSQL
// inboxes against raw consume and ack, in the same run on the same
// topic: every mode fetches alike, and figures are per-run rates,
// ratios and their medians.
package inbox
