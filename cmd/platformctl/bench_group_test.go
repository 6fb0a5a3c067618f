package main

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"
)

// bench group with tiny sizes on its own in-process fabric: every figure is
// one "name: value unit" line, and every figure is there.
func TestBenchGroupOutputFormat(t *testing.T) {
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs([]string{"bench", "group", "--in-process", "--sync-always=false",
		"--count", "2000", "--partitions", "4", "--members", "2", "--keys", "64",
		"--kills", "1", "--heartbeat", "100ms", "--ttl", "600ms", "--rate", "500"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := root.ExecuteContext(ctx); err != nil {
		t.Fatalf("bench group: %v\nstderr:\n%s", err, errOut.String())
	}
	line := regexp.MustCompile(`^bench\.group\.[a-z0-9_]+: [0-9]+(\.[0-9]+)? [a-z/]+$`)
	got := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if !line.MatchString(l) {
			t.Errorf("not a 'name: value unit' line: %q", l)
			continue
		}
		got[strings.SplitN(l, ":", 2)[0]] = true
	}
	for _, name := range []string{"raw_msgs_per_sec", "group_msgs_per_sec", "ratio_vs_raw", "rebalance_pause_p50", "rebalance_pause_p99", "rebalance_moved_partitions"} {
		if !got["bench.group."+name] {
			t.Errorf("no bench.group.%s line in:\n%s", name, out.String())
		}
	}
	if !strings.Contains(errOut.String(), "bench group: kill 1/1") {
		t.Errorf("no progress on stderr:\n%s", errOut.String())
	}
}

func TestBenchGroupRejectsBadFlags(t *testing.T) {
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs([]string{"bench", "group", "--in-process", "--members", "30", "--partitions", "24", "--count", "0"})
	err := root.Execute()
	var ue usageError
	if err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), "--members") || !strings.Contains(err.Error(), "--count") {
		t.Fatalf("err = %v, want a usage error naming --members and --count", err)
	}
}
