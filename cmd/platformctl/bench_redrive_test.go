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

// bench redrive with tiny sizes on its own in-process fabric: every
// figure is one "name: value unit" line, and every figure is there.
func TestBenchRedriveOutputFormat(t *testing.T) {
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs([]string{"bench", "redrive", "--sync-always=false", "--count", "500", "--rate-count", "300",
		"--rate", "200", "--runs", "1", "--partitions", "4", "--keys", "32"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := root.ExecuteContext(ctx); err != nil {
		t.Fatalf("bench redrive: %v\nstderr:\n%s", err, errOut.String())
	}
	line := regexp.MustCompile(`^bench\.redrive\.[a-z0-9_]+: [0-9]+(\.[0-9]+)? [a-z/]+$`)
	got := map[string]string{}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	// The first line names the settings both sides share.
	if want := "bench.redrive.settings: replicas=3 partitions=4 keys=32 size=1024B window=512 msg_id=both count=500 runs=1"; !strings.HasPrefix(lines[0], want) {
		t.Errorf("first line %q, want it to start with %q", lines[0], want)
	}
	for _, l := range lines[1:] {
		if !line.MatchString(l) {
			t.Errorf("not a 'name: value unit' line: %q", l)
			continue
		}
		kv := strings.SplitN(l, ": ", 2)
		got[kv[0]] = kv[1]
	}
	for _, name := range []string{"raw_publish_msgs_per_sec", "unlimited_msgs_per_sec", "ratio_vs_raw", "cpu_ratio_vs_raw", "rate_requested", "rate_achieved", "rate_ratio"} {
		if got["bench.redrive."+name] == "" {
			t.Errorf("no bench.redrive.%s line in:\n%s", name, out.String())
		}
	}
	if got["bench.redrive.rate_requested"] != "200 msg/s" {
		t.Errorf("rate_requested %q", got["bench.redrive.rate_requested"])
	}
	if !strings.Contains(errOut.String(), "bench redrive: redriving 300 entries at 200/s") {
		t.Errorf("no progress on stderr:\n%s", errOut.String())
	}
	t.Logf("\n%s", out.String())
}

func TestBenchRedriveRejectsBadFlags(t *testing.T) {
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs([]string{"bench", "redrive", "--count", "0", "--rate", "-5"})
	err := root.Execute()
	var ue usageError
	if err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), "--count") || !strings.Contains(err.Error(), "--rate") {
		t.Fatalf("err = %v, want a usage error naming --count and --rate", err)
	}
}
