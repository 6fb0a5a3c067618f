package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// bench quota --in-process prints one 'name: value unit' line per figure,
// the three ratios included.
func TestBenchQuotaOutputFormat(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node fabric")
	}
	profiles := t.TempDir()
	root, out, progress := testRoot([]string{"bench", "quota", "--in-process", "--quota", "200", "--b-rate", "50", "--conns", "3",
		"--duration", "1s", "--warmup", "300ms", "--count", "1000", "--runs", "1", "--window", "64", "--size", "128",
		"--profile-dir", profiles})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := root.ExecuteContext(ctx); err != nil {
		t.Fatalf("bench quota: %v\n%s", err, progress.String())
	}
	line := regexp.MustCompile(`^bench\.quota\.[a-z0-9_]+: -?[0-9]+(\.[0-9]+)? (msg/s|msgs|ms|us|x)$`)
	names := map[string]bool{}
	values := map[string]float64{}
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if !line.MatchString(l) {
			t.Errorf("malformed line %q", l)
		}
		name, rest, _ := strings.Cut(l, ": ")
		names[name] = true
		values[name], _ = strconv.ParseFloat(strings.Fields(rest)[0], 64)
	}
	// Every event A offered has exactly one outcome.
	sum := 0.0
	for _, o := range []string{"acked_in_window", "acked_before_window", "acked_after_window", "refused", "stalled", "errors_other", "unanswered"} {
		if _, ok := values["bench.quota.a_"+o]; !ok {
			t.Errorf("no bench.quota.a_%s", o)
		}
		sum += values["bench.quota.a_"+o]
	}
	if off := values["bench.quota.a_offered_msgs"]; off == 0 || sum != off || values["bench.quota.a_unaccounted"] != 0 {
		t.Errorf("A's outcomes sum to %.0f, offered %.0f, unaccounted %.0f", sum, off, values["bench.quota.a_unaccounted"])
	}
	for _, want := range []string{"bench.quota.a_achieved_over_quota", "bench.quota.b_p99_flooded_over_alone", "bench.quota.unthrottled_over_raw",
		"bench.quota.a_achieved", "bench.quota.b_p99_alone", "bench.quota.b_p99_flooded", "bench.quota.raw_msgs_per_sec", "bench.quota.unthrottled_msgs_per_sec"} {
		if !names[want] {
			t.Errorf("no %s in:\n%s", want, out.String())
		}
	}
	if !strings.Contains(progress.String(), "bench quota:") {
		t.Errorf("no progress on stderr")
	}
	// --profile-dir: one CPU profile per throughput run.
	for _, name := range []string{"raw-1.pprof", "unthrottled-1.pprof"} {
		if fi, err := os.Stat(filepath.Join(profiles, name)); err != nil || fi.Size() == 0 {
			t.Errorf("--profile-dir: %s: %v (size %d)", name, err, sizeOf(fi))
		}
	}
}

func sizeOf(fi os.FileInfo) int64 {
	if fi == nil {
		return 0
	}
	return fi.Size()
}

// --cpuprofile and --profile-dir cannot both profile: the bench refuses
// before it starts anything.
func TestBenchQuotaProfileFlagsConflict(t *testing.T) {
	root, _, _ := testRoot([]string{"bench", "quota", "--in-process", "--cpuprofile", filepath.Join(t.TempDir(), "cpu"), "--profile-dir", t.TempDir()})
	err := root.Execute()
	if err == nil || !strings.Contains(err.Error(), "--cpuprofile and --profile-dir") {
		t.Fatalf("want an error naming both flags, got %v", err)
	}
}
