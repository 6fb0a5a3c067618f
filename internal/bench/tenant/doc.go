// Package tenant measures the tenancy layer against raw JetStream in the
// same run, on a temporary fabric with a tenancy manager as platformd
// runs one (or, for quota, the platform at --server):
//
//   - RunQuota: a flooding tenant held to its publish-rate quota, what
//     the flood costs a neighbour's ack p99, and the ingest's throughput
//     and CPU per event against raw publish. Every event the flooding
//     tenant offers has exactly one outcome, so the outcomes add up to
//     what it offered.
//   - RunGate: a tenant member consuming through the JetStream gate
//     against the same consumer read straight from JetStream.
package tenant
