package main

import (
	"regexp"
	"strings"
	"testing"
)

// bench publish --in-process --compare tls with tiny settings: the plain
// and TLS figures and tls_over_plain are "name: value unit" lines, and
// the comparison ran 3 interleaved runs per side even with --runs 1.
func TestBenchPublishTLSOutputFormat(t *testing.T) {
	out, errOut := runBench(t, "bench", "publish", "--in-process", "--compare", "tls",
		"--count", "200", "--runs", "1", "--partitions", "2", "--window", "64", "--keys", "8")
	line := regexp.MustCompile(`^bench\.publish\.([a-z0-9_.]+): [0-9]+(\.[0-9]+)? (msg/s|MiB/s|ms|x)$`)
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		m := line.FindStringSubmatch(l)
		if m == nil {
			t.Errorf("not a 'name: value unit' line: %q", l)
			continue
		}
		got[m[1]] = l
	}
	for _, name := range []string{"plain.msgs_per_sec", "plain.ack_p99", "tls.msgs_per_sec", "tls.ack_p99", "tls_over_plain"} {
		if got[name] == "" {
			t.Errorf("no bench.publish.%s line in:\n%s", name, out)
		}
	}
	if !strings.HasSuffix(got["tls_over_plain"], " x") {
		t.Errorf("tls_over_plain: %q, want a ratio in x", got["tls_over_plain"])
	}
	for _, run := range []string{"run 1/3 tls=false", "run 2/3 tls=true", "run 3/3 tls=false"} {
		if !strings.Contains(errOut, "bench: tls comparison "+run) {
			t.Errorf("no %q on stderr:\n%s", run, errOut)
		}
	}
}

func TestBenchPublishRejectsBadCompare(t *testing.T) {
	wantUsageError(t, []string{"bench", "publish", "--in-process", "--compare", "tls,fast"}, "--compare", "fast")
}
