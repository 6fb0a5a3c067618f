// Package publish is bench publish: raw JetStream publish to a bench
// topic (the baseline the other harnesses report ratios against), and
// in-process comparisons measured in the same run: sync_always on
// against off, TLS on the client port against plaintext (runs
// interleaved, medians of at least 3 each), and publishing through
// platform.Publisher with schema validation against without.
package publish
