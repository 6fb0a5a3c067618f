// Package metrics exports the nats-server figures that matter for the
// platform in Prometheus format, read in-process from every local node at
// scrape time (no monitoring port is opened), plus a registry for the
// platform's own metrics.
//
// Every series carries the server name and region, so a fabric of three
// nodes in one process exports three series per figure. Stream series are
// exported by the node that leads the stream (one series per stream, no
// double counting) with the replica health the leader sees: a stream with
// a replica that is not current is under-replicated, and one with no
// leader has lost quorum: platform_stream_has_leader is 1 from the
// leader, and 0 from every server hosting a replica of a stream nobody
// leads (those are listed with all hosted streams, not only led ones).
package metrics
