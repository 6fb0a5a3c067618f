// Package bench holds what platformctl's benchmark harnesses share: raw
// JetStream publish (Publish), medians and percentiles, temporary
// in-process fabrics, the connection to --server (Remote), a bench
// database, process CPU and CPU profiles. Each harness is a subpackage
// (publish, outbox, inbox, group, queue, redrive, mirror, tenant);
// cmd/platformctl keeps only the commands' flags and usage checks.
//
// Every harness guarantees:
//
//   - It runs alone: it starts what it measures (a temporary fabric, or
//     its own topic, groups or tenants on --server) and removes it after.
//   - Its ratios compare against raw JetStream measured in the same run,
//     on the same fabric and machine, interleaved where it can: shared,
//     noisy machines make absolute figures meaningless across runs.
//   - A figure taken over repeated runs is the median of them, of at
//     least 3 by default.
//   - It prints one figure per line to stdout as "name: value unit", so
//     scripts can read and compare them; progress goes to stderr.
//   - Its sizes are flags: a short run (seconds, as the tests run it)
//     prints the same lines as a long one.
//
// A publish run sends Count events of Size bytes with up to Window
// publishes in flight (async publish, as a well-written producer does),
// timing each ack from the moment its publish was sent.
package bench
