package main

import (
	"strings"
	"testing"
)

// bench redrive with tiny sizes on its own in-process fabric: every
// figure is one "name: value unit" line, and every figure is there.
func TestBenchRedriveOutputFormat(t *testing.T) {
	out, errOut := runBench(t, "bench", "redrive", "--sync-always=false", "--count", "500", "--rate-count", "300",
		"--rate", "200", "--runs", "1", "--partitions", "4", "--keys", "32")
	// The first line names the settings both sides share.
	if want := "bench.redrive.settings: replicas=3 partitions=4 keys=32 size=1024B window=512 msg_id=both count=500 runs=1"; !strings.HasPrefix(out, want) {
		t.Errorf("first line of %q, want it to start with %q", out, want)
	}
	got := benchFigures(t, "redrive", out, 1)
	wantFigures(t, "redrive", got, out, errOut, "bench redrive: redriving 300 entries at 200/s",
		"raw_publish_msgs_per_sec", "unlimited_msgs_per_sec", "ratio_vs_raw", "cpu_ratio_vs_raw", "rate_requested", "rate_achieved", "rate_ratio")
	if got["rate_requested"] != "200 msg/s" {
		t.Errorf("rate_requested %q", got["rate_requested"])
	}
	t.Logf("\n%s", out)
}

func TestBenchRedriveRejectsBadFlags(t *testing.T) {
	wantUsageError(t, []string{"bench", "redrive", "--count", "0", "--rate", "-5"}, "--count", "--rate")
}
