package daemontest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/msgplatform/platform/conf"
	"github.com/msgplatform/platform/internal/daemon"
	"github.com/msgplatform/platform/platform"
)

// Daemon is a running platformd and its configuration.
type Daemon struct {
	*daemon.Daemon
	Config *conf.Config
}

// Creds is the admin credentials file the daemon wrote.
func (d *Daemon) Creds() string { return filepath.Join(d.Config.DataDir, "creds", "admin.creds") }

// URL is the client URL of the first node.
func (d *Daemon) URL() string { return d.Nodes()[0].ClientURL() }

// Start runs platformd with nodes nodes and HarborCart's catalog, scaled
// down (orders: 4 partitions; group email-notifier; queue shipment-jobs),
// and stops it when the test ends.
func Start(t testing.TB, nodes int) *Daemon {
	t.Helper()
	cfg := conf.DefaultConfig()
	cfg.Mode = conf.ModeFabric
	cfg.DataDir = t.TempDir()
	cfg.Fabric.Nodes = nodes
	cfg.Fabric.Port = -1
	cfg.Fabric.ClusterPort = -1
	cfg.Fabric.DataDir = ""
	cfg.Fabric.LameDuck = 200 * time.Millisecond
	cfg.Fabric.Durability.Replicas = min(nodes, 3)
	cfg.HTTP.Listen = "127.0.0.1:0"
	orders := platform.DefaultTopicSpec("orders")
	orders.Partitions, orders.Replicas, orders.Key = 4, min(nodes, 3), "order:<orderId>"
	jobs := platform.DefaultQueueSpec("shipment-jobs")
	jobs.Replicas = min(nodes, 3)
	cfg.Catalog = platform.Catalog{
		Topics: map[string]platform.TopicSpec{"orders": orders},
		Queues: map[string]platform.QueueSpec{"shipment-jobs": jobs},
		Groups: map[string]platform.GroupSpec{"email-notifier": {Name: "email-notifier", Topic: "orders"}},
	}
	cfg.EnsureDefaults()
	d, err := daemon.New(&cfg, nil)
	if err != nil {
		t.Fatalf("daemontest: new daemon: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := d.Start(ctx); err != nil {
		t.Fatalf("daemontest: start daemon: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_ = d.Close(ctx)
	})
	return &Daemon{Daemon: d, Config: &cfg}
}
