// Package bench measures publish throughput and ack latency against real
// JetStream. RawPublish is the baseline every platform benchmark reports a
// ratio against, measured in the same run on the same machine: shared,
// noisy machines make absolute figures meaningless across runs.
//
// A run publishes Count events of Size bytes with up to Window publishes
// in flight (async publish, as a well-written producer does), timing each
// ack from the moment its publish was sent. Runs repeats it and reports
// the median of each figure. Results print one figure per line as
// "name: value unit" so scripts can read them.
package bench
