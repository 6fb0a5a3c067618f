package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/msgplatform/platform/conf"
	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/daemon"
	"github.com/msgplatform/platform/platform"
)

// TestCLIRegions runs region and residency commands against platformd in
// mode regions (eu home, us; one node each).
func TestCLIRegions(t *testing.T) {
	cfg := conf.DefaultConfig()
	cfg.Mode = conf.ModeRegions
	cfg.DataDir = t.TempDir()
	cfg.HTTP.Listen = "off"
	cfg.Reconcile.AllowReducedReplicas = true
	cfg.Regions.LeafPort = -1
	for _, name := range []string{"eu", "us"} {
		fc := embeddednats.DefaultFabricConfig()
		fc.Region = embeddednats.Region{Name: name}
		fc.Nodes, fc.Port, fc.ClusterPort, fc.DataDir = 1, -1, -1, ""
		fc.LameDuck = 200 * time.Millisecond
		fc.Durability.Replicas = 1
		cfg.Regions.Fabrics = append(cfg.Regions.Fabrics, fc)
	}
	eu, orders := platform.DefaultTopicSpec("orders.eu"), platform.DefaultTopicSpec("orders")
	eu.Replicas, eu.Residency = 1, "eu"
	orders.Replicas = 1
	cfg.Catalog = platform.Catalog{Topics: map[string]platform.TopicSpec{"orders.eu": eu, "orders": orders}}
	cfg.EnsureDefaults()
	d, err := daemon.New(&cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close(context.Background()) })
	run := func(args ...string) (string, error) {
		root := newRootCmd()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&out)
		root.SetArgs(append([]string{"--server", d.Nodes()[0].ClientURL(), "--creds", filepath.Join(cfg.DataDir, "creds", "admin.creds"), "--timeout", "30s"}, args...))
		err := root.ExecuteContext(ctx)
		return out.String(), err
	}

	out, err := run("region", "mirror", "orders.eu", "--to", "us")
	if !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), "topic orders.eu is resident in eu") {
		t.Fatalf("resident mirror: want a refusal naming eu, got %v\n%s", err, out)
	}
	if out, err = run("region", "mirror", "orders", "--to", "us"); err != nil || !strings.Contains(out, "created mirror of topic orders: eu -> us") {
		t.Fatalf("mirror orders: %v\n%s", err, out)
	}
	if out, err = run("topic", "describe", "orders"); err != nil || !strings.Contains(out, "LAG (EVENTS)") {
		t.Fatalf("topic describe shows no mirror lag: %v\n%s", err, out)
	}
	out, err = run("residency", "report")
	if err != nil || !strings.Contains(out, "us:orders(mirror of orders)") || !strings.Contains(out, "No violations.") {
		t.Fatalf("residency report: %v\n%s", err, out)
	}
	out, err = run("region", "failover", "orders.eu", "--to", "us")
	if !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), "degrade mode") {
		t.Fatalf("resident failover: want a refusal offering degrade mode, got %v\n%s", err, out)
	}
	if out, err = run("region", "failover", "orders", "--to", "us", "--dry-run"); err != nil || !strings.Contains(out, "would fail over (dry run): eu -> us") || !strings.Contains(out, "mirror behind: 0 events") {
		t.Fatalf("failover dry run: %v\n%s", err, out)
	}
	if out, err = run("region", "failover", "orders", "--to", "us"); err != nil || !strings.Contains(out, "topic orders failed over: eu -> us") || !strings.Contains(out, "duplicate window consumers must absorb") {
		t.Fatalf("failover: %v\n%s", err, out)
	}
	t.Log(out)
	if out, err = run("region", "failback", "orders"); err != nil || !strings.Contains(out, "topic orders failed back: us -> eu") || !strings.Contains(out, "mirroring resumed: eu -> us") {
		t.Fatalf("failback: %v\n%s", err, out)
	}
	t.Log(out)
	if out, err = run("region", "list"); err != nil || !strings.Contains(out, "eu") || !strings.Contains(out, "us") {
		t.Fatalf("region list: %v\n%s", err, out)
	}
	t.Log(out)
}
