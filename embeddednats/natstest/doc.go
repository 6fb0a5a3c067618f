// Package natstest starts real embedded JetStream fabrics in-process for
// tests: 127.0.0.1, free ports, t.TempDir() stores, t.Cleanup shutdown.
// It can kill, restart and isolate one node; isolation cuts the node's
// routes through a proxy the helper puts in front of every cluster port, so
// the node keeps running and keeps its clients, as in a network partition.
//
// Beside the fabrics it holds what every JetStream test needs: a context
// bounded by the test (Context), a logger that speaks only when
// PLATFORM_TEST_LOG is set (Logger), a connection closed with the test
// (Connect), free loopback ports (FreePorts), and stream and consumer
// reads (StreamConfig, ConsumerConfig, FetchAll).
//
// Helpers take testing.TB, fail the test with t.Fatal on error and never
// panic.
package natstest
