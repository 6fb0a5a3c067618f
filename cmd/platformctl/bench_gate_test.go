package main

import (
	"strings"
	"testing"
)

// bench gate with a small count: the tenant member drains its group
// through the gate, every figure is one "name: value unit" line, and
// progress goes to stderr.
func TestBenchGateOutputFormat(t *testing.T) {
	out, errOut := runBench(t, "bench", "gate", "--count", "300", "--batch", "50", "--runs", "2")
	if !strings.HasPrefix(out, "bench.gate.params: count=300 size=1024B batch=50 replicas=3 runs=2") {
		t.Errorf("first line is not the params:\n%s", out)
	}
	wantFigures(t, "gate", benchFigures(t, "gate", out, 2), out, errOut, "bench gate: run 2/2: queueing 300 events for raw",
		"run1.raw.events_per_sec", "run1.gated.events_per_sec", "run2.gated.first_batch_ms", "run2.gated_over_raw",
		"median.raw.events_per_sec", "median.gated.events_per_sec", "median.gated_over_raw", "median.first_batch_gated_over_raw")
}

func TestBenchGateRejectsBadFlags(t *testing.T) {
	wantUsageError(t, []string{"bench", "gate", "--batch", "0", "--count", "0"}, "--batch", "--count")
}
