package main

import (
	"testing"
)

// TestBenchMirror runs a short mirror bench and checks every figure is
// printed as 'name: value unit' and every event reached the mirror.
func TestBenchMirror(t *testing.T) {
	if testing.Short() {
		t.Skip("bench mirror starts two regions; skipped with -short")
	}
	root, out, errb := testRoot([]string{"bench", "mirror", "--rate", "1000", "--duration", "1s"})
	if err := root.ExecuteContext(t.Context()); err != nil {
		t.Fatalf("bench mirror: %v\n%s", err, errb.String())
	}
	wantContains(t, "bench mirror", out.String(), "mirror_lag_p50:", "mirror_lag_p99:", "mirror_throughput_ratio:", "mirror_publish_ratio_mirrored_vs_raw:", "mirror_events_received: 1000 of 1000 events")
	t.Log(out.String())
}
