package daemontest

import (
	"context"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/conf"
	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/embeddednats/natstest"
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
	// Free ports are picked by listening and closing; a test running in
	// parallel can take one first: try again with fresh ports then.
	for attempt := 1; ; attempt++ {
		c := cfg
		c.DataDir = t.TempDir()
		c.EnsureDefaults()
		d, err := daemon.New(&c, nil)
		if err != nil {
			t.Fatalf("daemontest: new daemon: %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		err = d.Start(ctx)
		cancel()
		if err != nil {
			if errors.Is(err, embeddednats.ErrPortInUse) && attempt < 3 {
				t.Logf("daemontest: %v; retrying with other ports", err)
				continue
			}
			t.Fatalf("daemontest: start daemon: %v", err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			_ = d.Close(ctx)
		})
		return &Daemon{Daemon: d, Config: &c}
	}
}

// Admin connects to url with the admin credentials of trust, fails the
// test when it cannot, and closes the connection when the test ends.
func Admin(t testing.TB, trust *embeddednats.Trust, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := embeddednats.ConnectAdmin(trust, url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// AdminConn is Admin to the daemon's first node.
func (d *Daemon) AdminConn(t testing.TB, opts ...nats.Option) *nats.Conn {
	t.Helper()
	return Admin(t, d.Trust(), d.URL(), opts...)
}

// StartAdmin is Start of nodes nodes with an admin connection (opts) to
// its first node, that connection's JetStream, and a context that ends
// after timeout or when the test ends.
func StartAdmin(t testing.TB, nodes int, timeout time.Duration, opts ...nats.Option) (*Daemon, *nats.Conn, jetstream.JetStream, context.Context) {
	t.Helper()
	d := Start(t, nodes)
	nc := d.AdminConn(t, opts...)
	return d, nc, natstest.JetStream(t, nc), natstest.Context(t, timeout)
}

// HTTPGet returns the status and body of GET path on d's HTTP port.
func HTTPGet(t testing.TB, d *daemon.Daemon, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + d.HTTPAddr().String() + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
