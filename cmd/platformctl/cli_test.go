package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/msgplatform/platform/internal/cli"
	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/daemon/daemontest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
)

// runCLI runs platformctl with args against d and returns stdout.
func runCLI(t *testing.T, d *daemontest.Daemon, args ...string) (string, error) {
	t.Helper()
	out, _, err := runCLIStderr(t, d, args...)
	return out, err
}

func mustCLI(t *testing.T, d *daemontest.Daemon, args ...string) string {
	t.Helper()
	out, err := runCLI(t, d, args...)
	if err != nil {
		t.Fatalf("platformctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func TestCLIAgainstDevFabric(t *testing.T) {
	d := daemontest.Start(t, 3)

	out := mustCLI(t, d, "status")
	wantContains(t, "status", out, "Meta leader: local-n", "local-n1", "local-n2", "local-n3", "orders", "topic", "shipment-jobs", "queue", "3/3")

	out = mustCLI(t, d, "topic", "create", "payments", "--partitions", "6", "--owner", "payments-team", "--key", "payment:<id>")
	if !strings.Contains(out, "create topic payments") {
		t.Fatalf("topic create:\n%s", out)
	}
	if out = mustCLI(t, d, "topic", "create", "payments", "--partitions", "6", "--owner", "payments-team", "--key", "payment:<id>"); !strings.Contains(out, "unchanged") {
		t.Fatalf("second topic create is not idempotent:\n%s", out)
	}
	// A partition-count change is refused and nothing changes.
	_, err := runCLI(t, d, "topic", "create", "payments", "--partitions", "12", "--owner", "payments-team", "--key", "payment:<id>")
	if !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), "partitions") {
		t.Fatalf("partition change: err = %v, want a conflict naming partitions", err)
	}
	// Lowering replicas needs the explicit flag.
	_, err = runCLI(t, d, "topic", "create", "payments", "--partitions", "6", "--replicas", "1", "--owner", "payments-team", "--key", "payment:<id>")
	if !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), "allow-reduced-replicas") {
		t.Fatalf("replicas 3->1: err = %v, want a conflict naming --allow-reduced-replicas", err)
	}

	out = mustCLI(t, d, "topic", "list")
	if !regexp.MustCompile(`payments\s+6\s+3/3 current`).MatchString(out) || !strings.Contains(out, "orders") {
		t.Fatalf("topic list:\n%s", out)
	}

	out = mustCLI(t, d, "topic", "describe", "orders")
	wantContains(t, "topic describe", out, "Topic orders", "partitions:  4", "PARTITION", "GROUP", "email-notifier")

	if out = mustCLI(t, d, "queue", "create", "refund-jobs", "--lease", "30s", "--max-attempts", "3"); !strings.Contains(out, "create queue refund-jobs") {
		t.Fatalf("queue create:\n%s", out)
	}
	out = mustCLI(t, d, "queue", "list")
	if !regexp.MustCompile(`refund-jobs\s+30s\s+3\s+3/3 current`).MatchString(out) || !strings.Contains(out, "shipment-jobs") {
		t.Fatalf("queue list:\n%s", out)
	}
	if out = mustCLI(t, d, "group", "create", "fraud-monitor", "--topic", "orders"); !strings.Contains(out, "create group fraud-monitor") {
		t.Fatalf("group create:\n%s", out)
	}

	// bench publish prints one "name: value unit" line per figure.
	out = mustCLI(t, d, "bench", "publish", "--count", "300", "--runs", "1", "--partitions", "3")
	figure := regexp.MustCompile(`^bench\.publish\.[a-z0-9_]+: [0-9.]+ (msg/s|MiB/s|ms)$`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("bench publish printed %d lines, want 4:\n%s", len(lines), out)
	}
	for _, l := range lines {
		if !figure.MatchString(l) {
			t.Errorf("bench line %q is not 'name: value unit'", l)
		}
	}
}

func TestCLIErrorsNameTheProblem(t *testing.T) {
	d := daemontest.Start(t, 1)
	cases := []struct {
		args  []string
		usage bool
		want  string
	}{
		{[]string{"topic", "create", "Bad Name"}, true, "name"},
		{[]string{"topic", "create", "orders2", "--partitions", "0"}, true, "partitions: must be 1..1024, got 0"},
		{[]string{"topic", "create"}, true, "want NAME"},
		{[]string{"topic", "describe", "nope"}, false, "nope"},
		{[]string{"queue", "create", "q", "--lease", "0s"}, true, "lease"},
		{[]string{"group", "create", "g", "--topic", "missing"}, false, "missing"},
		{[]string{"bench", "publish", "--size", "banana"}, true, "--size"},
		{[]string{"--timeout", "soon", "status"}, true, "--timeout"},
	}
	for _, c := range cases {
		_, err := runCLI(t, d, c.args...)
		if err == nil {
			t.Errorf("platformctl %v: no error", c.args)
			continue
		}
		var ue cli.UsageError
		if isUsage := errors.As(err, &ue); isUsage != c.usage {
			t.Errorf("platformctl %v: usage error = %v, want %v (%v)", c.args, isUsage, c.usage, err)
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("platformctl %v: error %q does not name %q", c.args, err, c.want)
		}
	}

	// Missing credentials: say where they were looked for and what to do.
	root := newRootCmd()
	root.SetOut(&bytes.Buffer{})
	root.SetArgs([]string{"--server", d.URL(), "--data-dir", t.TempDir(), "status"})
	err := root.Execute()
	if err == nil || !strings.Contains(err.Error(), "admin.creds") || !strings.Contains(err.Error(), "start platformd") {
		t.Fatalf("missing creds: err = %v", err)
	}
}

func TestStatusAndDescribeOutputGolden(t *testing.T) {
	st := control.Status{
		Region: "local", Domain: "local", Server: "local-n1", MetaLeader: "local-n2",
		Nodes: []control.NodeStatus{
			{Name: "local-n1", Current: true},
			{Name: "local-n2", Leader: true, Current: true},
			{Name: "local-n3", Offline: true, Lag: 12},
		},
		Streams: []control.StreamStatus{
			{Name: "orders", Kind: "topic", Replicas: 3, Leader: "local-n2", Messages: 1200, Bytes: 1228800,
				Peers: []control.ReplicaPeer{{Name: "local-n1", Current: true}, {Name: "local-n3", Offline: true, Lag: 40}}},
			{Name: "shipment-jobs", Kind: "queue", Replicas: 3, Leader: "", Messages: 3, Bytes: 300},
		},
	}
	var out bytes.Buffer
	if err := writeStatus(&out, st); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "status.golden", out.String())

	ts := catalog.TopicStatus{
		TopicInfo: catalog.TopicInfo{
			Spec: platform.TopicSpec{Name: "orders", Partitions: 3, Replicas: 3, Key: "order:<orderId>", Owner: "orders-team",
				Retention: platform.Retention{MaxAge: 72 * time.Hour}},
			Stream: catalog.StreamStatus{Name: "orders", Messages: 10, Bytes: 10240, FirstSeq: 1, LastSeq: 10,
				Cluster: catalog.ClusterStatus{Leader: "local-n1", Replicas: []catalog.ReplicaStatus{
					{Name: "local-n1", Leader: true, Current: true}, {Name: "local-n2", Current: true}, {Name: "local-n3"}}}},
		},
		Partitions: []catalog.PartitionStatus{{Partition: 0, Messages: 4}, {Partition: 1, Messages: 3}, {Partition: 2, Messages: 3}},
		Groups: []catalog.GroupStatus{
			{Name: "email-notifier", Pending: 0},
			{Name: "sales-analytics", Pending: 5, OldestAge: 95 * time.Second, Partitions: []catalog.GroupPartitionStatus{
				{Partition: 0, Pending: 2}, {Partition: 1}, {Partition: 2, Pending: 3}}},
		},
	}
	out.Reset()
	if err := writeTopicStatus(&out, ts); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "topic_describe.golden", out.String())
}

// checkGolden fails the test unless got is testdata/name; with -update it
// writes got there first.
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if updateGolden() {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (go test -update rewrites it)\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}
