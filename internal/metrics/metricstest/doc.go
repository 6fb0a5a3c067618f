// Package metricstest reads gathered Prometheus metrics in tests: the
// counters and gauges of one metric whose labels match, by value.
package metricstest
