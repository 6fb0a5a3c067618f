package main

import "testing"

// bench group with tiny sizes on its own in-process fabric: every figure is
// one "name: value unit" line, and every figure is there.
func TestBenchGroupOutputFormat(t *testing.T) {
	out, errOut := runBench(t, "bench", "group", "--in-process", "--sync-always=false",
		"--count", "2000", "--partitions", "4", "--members", "2", "--keys", "64",
		"--kills", "1", "--heartbeat", "100ms", "--ttl", "600ms", "--rate", "500")
	wantFigures(t, "group", benchFigures(t, "group", out, 0), out, errOut, "bench group: kill 1/1",
		"raw_msgs_per_sec", "group_msgs_per_sec", "ratio_vs_raw", "rebalance_pause_p50", "rebalance_pause_p99", "rebalance_moved_partitions")
}

func TestBenchGroupRejectsBadFlags(t *testing.T) {
	wantUsageError(t, []string{"bench", "group", "--in-process", "--members", "30", "--partitions", "24", "--count", "0"},
		"--members", "--count")
}
