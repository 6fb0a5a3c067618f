package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/msgplatform/platform/conf"
	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/daemon"
	"github.com/msgplatform/platform/internal/daemon/daemontest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
)

func startDaemon(t *testing.T, nodes int) (*daemon.Daemon, *conf.Config) {
	t.Helper()
	d := daemontest.Start(t, nodes)
	return d.Daemon, d.Config
}

func TestDaemonServesHealthMetricsAndControlAPI(t *testing.T) {
	d, cfg := startDaemon(t, 3)

	if code, body := daemontest.HTTPGet(t, d, "/healthz"); code != 200 {
		t.Fatalf("/healthz = %d %s", code, body)
	}
	if code, body := daemontest.HTTPGet(t, d, "/readyz"); code != 200 {
		t.Fatalf("/readyz = %d %s", code, body)
	}

	// Admin credentials are written 0600 and work for a plain nats.go client.
	creds := filepath.Join(cfg.DataDir, "creds", "admin.creds")
	st, err := os.Stat(creds)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("admin.creds mode %v, want 0600", st.Mode().Perm())
	}
	nc, err := nats.Connect(d.Nodes()[0].ClientURL(), nats.UserCredentials(creds))
	if err != nil {
		t.Fatalf("connect with admin.creds: %v", err)
	}
	defer nc.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var status control.Status
	if err := control.Call(ctx, nc, control.SubjStatus, nil, &status); err != nil {
		t.Fatalf("status: %v", err)
	}
	if status.MetaLeader == "" || len(status.Nodes) != 3 {
		t.Fatalf("status: meta leader %q, %d nodes; want a leader and 3 nodes", status.MetaLeader, len(status.Nodes))
	}
	leaders := 0
	for i, n := range status.Nodes {
		if want := fmt.Sprintf("local-n%d", i+1); n.Name != want {
			t.Fatalf("status nodes = %+v; want local-n1..3 once each", status.Nodes)
		}
		if n.Leader {
			leaders++
			if n.Name != status.MetaLeader {
				t.Fatalf("node %s marked leader, meta leader is %s", n.Name, status.MetaLeader)
			}
		}
	}
	if leaders != 1 {
		t.Fatalf("status nodes = %+v; want exactly one leader", status.Nodes)
	}
	kinds := map[string]string{}
	for _, s := range status.Streams {
		kinds[s.Name] = s.Kind
	}
	if kinds["orders"] != "topic" || kinds["shipment-jobs"] != "queue" {
		t.Fatalf("status streams = %v", kinds)
	}

	// Publish through the topic subject and see it in describe and metrics.
	for i := range 20 {
		if _, err := nc.Request("orders.order:HC-"+string(rune('A'+i)), []byte("x"), 5*time.Second); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	// Consumers learn of new messages a moment after the stream acks them:
	// describe converges to 20 pending.
	natstest.WaitFor(t, 10*time.Second, func() error {
		var ts catalog.TopicStatus
		if err := control.Call(ctx, nc, control.SubjTopicDescribe, control.NameRequest{Name: "orders"}, &ts); err != nil {
			return err
		}
		var sum uint64
		for _, p := range ts.Partitions {
			sum += p.Messages
		}
		if sum != 20 || len(ts.Groups) != 1 || ts.Groups[0].Pending != 20 {
			return fmt.Errorf("partition sum %d, groups %+v; want 20 and email-notifier pending 20", sum, ts.Groups)
		}
		return nil
	})

	_, metrics := daemontest.HTTPGet(t, d, "/metrics")
	for _, want := range []string{
		`platform_nats_server_up{region="local",server="local-n1"} 1`,
		`platform_jetstream_meta_has_leader{region="local",server="local-n2"} 1`,
		`platform_stream_messages{account="PLATFORM",region="local",server=`,
		`platform_stream_replicas_lagging{account="PLATFORM",region="local",server=`,
		`platform_consumer_pending_messages{account="PLATFORM",consumer="email-notifier-p0"`,
		`platform_ready 1`,
		`platform_reconcile_changes_total{action="create",kind="topic"} 1`,
		`platform_control_requests_total{endpoint="status",outcome="ok"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if !strings.Contains(metrics, `stream="orders"} 20`) {
		t.Errorf("/metrics does not show 20 messages in orders")
	}
}

func TestControlAPIRefusesConflictsAndBadInput(t *testing.T) {
	d, cfg := startDaemon(t, 1)
	nc, err := nats.Connect(d.Nodes()[0].ClientURL(), nats.UserCredentials(filepath.Join(cfg.DataDir, "creds", "admin.creds")))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	spec := cfg.Catalog.Topics["orders"]
	spec.Partitions = 8
	err = control.Call(ctx, nc, control.SubjTopicApply, control.ApplyTopicRequest{Spec: spec}, nil)
	if !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), "per-key order") {
		t.Fatalf("partition change: err = %v, want a conflict naming per-key order", err)
	}
	var ts catalog.TopicStatus
	if err := control.Call(ctx, nc, control.SubjTopicDescribe, control.NameRequest{Name: "orders"}, &ts); err != nil {
		t.Fatal(err)
	}
	if ts.Spec.Partitions != 4 {
		t.Fatalf("partitions after refused change = %d, want 4", ts.Spec.Partitions)
	}

	bad := platform.TopicSpec{Name: "Bad Name", Partitions: 0, Replicas: 9}
	err = control.Call(ctx, nc, control.SubjTopicApply, control.ApplyTopicRequest{Spec: bad}, nil)
	if !errors.Is(err, control.ErrInvalid) {
		t.Fatalf("bad spec: err = %v, want ErrInvalid", err)
	}
	for _, key := range []string{"name", "partitions: must be 1..1024, got 0", "replicas"} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("bad spec error %q does not name %q", err, key)
		}
	}
	err = control.Call(ctx, nc, control.SubjTopicDescribe, control.NameRequest{Name: "nope"}, &ts)
	if !errors.Is(err, control.ErrNotFound) {
		t.Fatalf("describe unknown topic: err = %v, want ErrNotFound", err)
	}
	// Unknown JSON fields are refused, not ignored.
	msg, err := nc.Request(control.SubjectPrefix+"."+control.SubjTopicApply, []byte(`{"spec":{"name":"x"},"partitons":3}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Header.Get("Nats-Service-Error-Code") != "400" {
		t.Fatalf("unknown field: reply %q %v, want a 400", msg.Data, msg.Header)
	}
}

// TestNatsCLIWithAdminCreds: the real nats CLI lists the platform's streams
// and its control service with the creds platformd wrote.
func TestNatsCLIWithAdminCreds(t *testing.T) {
	natsBin, err := exec.LookPath("nats")
	if err != nil {
		home, _ := os.UserHomeDir()
		natsBin = filepath.Join(home, "go", "bin", "nats")
		if _, err := os.Stat(natsBin); err != nil {
			t.Skip("nats CLI not installed (scripts/test installs it: go install github.com/nats-io/natscli/nats@v0.5.0)")
		}
	}
	d, cfg := startDaemon(t, 1)
	creds := filepath.Join(cfg.DataDir, "creds", "admin.creds")
	run := func(args ...string) string {
		t.Helper()
		all := append([]string{"--server", d.Nodes()[0].ClientURL(), "--creds", creds, "--no-context"}, args...)
		cmd := exec.Command(natsBin, all...)
		cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("nats %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("pub", "orders.order:HC-2048", `{"id":"evt-HC2048-01"}`)
	if out := run("stream", "ls", "--names"); !strings.Contains(out, "orders") || !strings.Contains(out, "shipment-jobs") {
		t.Fatalf("nats stream ls:\n%s", out)
	}
	if out := run("stream", "info", "orders", "--json"); !strings.Contains(out, `"messages": 1`) {
		t.Fatalf("nats stream info orders:\n%s", out)
	}
	if out := run("micro", "ls"); !strings.Contains(out, "platform") {
		t.Fatalf("nats micro ls:\n%s", out)
	}
}

func TestBadConfigIsRefusedBeforeAnythingListens(t *testing.T) {
	cfg := conf.DefaultConfig()
	cfg.Mode = "cluster"
	cfg.Fabric.Nodes = 0
	cfg.HTTP.Listen = "nowhere"
	bad := platform.DefaultTopicSpec("orders")
	bad.Partitions = 0
	cfg.Catalog.Topics = map[string]platform.TopicSpec{"orders": bad}
	_, err := daemon.New(&cfg, nil)
	if err == nil {
		t.Fatal("bad config accepted")
	}
	for _, key := range []string{"mode", "http.listen", "topics.orders.partitions: must be 1..1024, got 0"} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("error does not name %q:\n%v", key, err)
		}
	}
}
