package main

import (
	"strings"
	"testing"
)

// bench queue with a small count on its own in-process fabric: every
// figure is one "name: value unit" line, every figure is there, and
// progress goes to stderr.
func TestBenchQueueOutputFormat(t *testing.T) {
	out, errOut := runBench(t, "bench", "queue", "--in-process", "--count", "300", "--runs", "2", "--concurrency", "4", "--work", "0s")
	if !strings.HasPrefix(out, "bench.queue.params: count=300 size=1024B concurrency=4 work=0s replicas=3") {
		t.Errorf("first line is not the params:\n%s", out)
	}
	wantFigures(t, "queue", benchFigures(t, "queue", out, 1), out, errOut, "bench queue: run 2/2: queueing 300 jobs for workers",
		"run1.raw.jobs_per_sec", "run1.workers.jobs_per_sec", "run2.workers_vs_raw_ratio",
		"median.raw.jobs_per_sec", "median.workers.jobs_per_sec", "median.workers_vs_raw_ratio")
}

func TestBenchQueueRejectsBadFlags(t *testing.T) {
	wantUsageError(t, []string{"bench", "queue", "--in-process", "--concurrency", "0", "--count", "0", "--work", "-1s"},
		"--concurrency", "--count", "--work")
}
