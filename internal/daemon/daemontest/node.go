// Node-mode and regions helpers: the configs of a mode-node region and of
// a two-region platformd, and daemons started from them, closed when the
// test ends.

package daemontest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/msgplatform/platform/conf"
	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/internal/daemon"
	"github.com/msgplatform/platform/platform"
)

// NodeRegionConfig is a mode-node platformd of region name: one node
// (named name+"1") on 127.0.0.1:port, R1, the shared trust saved in its
// data directory, the catalog cat and the peer regions peers. Its HTTP
// port is off; set cfg.HTTP.Listen for one.
func NodeRegionConfig(t testing.TB, trust *embeddednats.Trust, name string, port int, cat platform.Catalog, peers []conf.PeerRegion) *conf.Config {
	t.Helper()
	cfg := conf.DefaultConfig()
	cfg.Mode = conf.ModeNode
	cfg.DataDir = filepath.Join(t.TempDir(), name)
	if err := trust.Save(filepath.Join(cfg.DataDir, "trust")); err != nil {
		t.Fatal(err)
	}
	cfg.HTTP.Listen = "off"
	cfg.Reconcile.AllowReducedReplicas = true
	n := &cfg.Node
	n.Name = name + "1"
	n.Region = embeddednats.Region{Name: name}
	n.Host, n.Port = "127.0.0.1", port
	n.StoreDir = ""
	n.LameDuck = 200 * time.Millisecond
	n.Durability.Replicas = 1
	cfg.Catalog = cat
	cfg.Regions.Peers = peers
	return &cfg
}

// NewConfig fills cfg's defaults and builds its daemon, not started; it is
// closed when the test ends.
func NewConfig(t testing.TB, cfg *conf.Config) *daemon.Daemon {
	t.Helper()
	cfg.EnsureDefaults()
	d, err := daemon.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = d.Close(ctx)
	})
	return d
}

// StartConfig fills cfg's defaults, starts its daemon (bounded at 60 s) and
// closes it when the test ends.
func StartConfig(t testing.TB, cfg *conf.Config) *daemon.Daemon {
	t.Helper()
	d := NewConfig(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := d.Start(ctx); err != nil {
		t.Fatalf("start %s: %v", cfg.Node.Region.Name, err)
	}
	return d
}

// ClusterConfigs are the configs of a mode-node region "eu" of
// len(clientPorts) nodes n1, n2, … on 127.0.0.1, node i on clientPorts[i]
// and routePorts[i] with routes to every other route port, each with the
// shared trust saved in dir/n<i+1>. Their HTTP port is off; defaults are
// not filled, so the caller can change them first.
func ClusterConfigs(t testing.TB, trust *embeddednats.Trust, dir string, clientPorts, routePorts []int) []*conf.Config {
	t.Helper()
	var cfgs []*conf.Config
	for i := range clientPorts {
		cfg := conf.DefaultConfig()
		cfg.Mode = conf.ModeNode
		cfg.DataDir = filepath.Join(dir, fmt.Sprintf("n%d", i+1))
		if err := trust.Save(filepath.Join(cfg.DataDir, "trust")); err != nil {
			t.Fatal(err)
		}
		cfg.HTTP.Listen = "off"
		n := &cfg.Node
		n.Name = fmt.Sprintf("n%d", i+1)
		n.Region = embeddednats.Region{Name: "eu"}
		n.Port = clientPorts[i]
		n.Cluster.Port = routePorts[i]
		n.StoreDir = ""
		n.LameDuck = 200 * time.Millisecond
		for j, p := range routePorts {
			if j != i {
				n.Cluster.Routes = append(n.Cluster.Routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
			}
		}
		cfgs = append(cfgs, &cfg)
	}
	return cfgs
}

// StartAll builds a daemon of each config (defaults already filled), each
// closed when the test ends, and starts them all at once, each start
// bounded by timeout. It returns the daemons and the start errors joined.
func StartAll(t testing.TB, cfgs []*conf.Config, timeout time.Duration) ([]*daemon.Daemon, error) {
	t.Helper()
	ds := make([]*daemon.Daemon, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i, cfg := range cfgs {
		d, err := daemon.New(cfg, nil)
		if err != nil {
			t.Fatalf("node %d: %v", i+1, err)
		}
		ds[i] = d
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = d.Close(ctx)
		})
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			defer cancel()
			errs[i] = d.Start(ctx)
		}()
	}
	wg.Wait()
	return ds, errors.Join(errs...)
}

// RegionsConfig is a mode-regions platformd of two one-node regions, eu
// (the home region) and us, on free ports with R1 and no leafnode port,
// in a fresh t.TempDir(). Its HTTP listener and catalog are the
// default's; defaults are not filled.
func RegionsConfig(t testing.TB) conf.Config {
	cfg := conf.DefaultConfig()
	cfg.Mode = conf.ModeRegions
	cfg.DataDir = t.TempDir()
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
	return cfg
}

// StartRetrying builds a config with build, fills its defaults and starts
// its daemon (logging to log) within 60 s; the daemon is closed when the
// test ends. Free ports are picked by listening and closing, so a
// parallel test can take one first: a start that finds a port in use is
// made again on a config built anew, at most three times in all.
func StartRetrying(t testing.TB, log *slog.Logger, build func() conf.Config) (*daemon.Daemon, *conf.Config) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		cfg := build()
		cfg.EnsureDefaults()
		d, err := daemon.New(&cfg, log)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		err = d.Start(ctx)
		cancel()
		if errors.Is(err, embeddednats.ErrPortInUse) && attempt < 3 {
			continue
		}
		if err != nil {
			t.Fatalf("start: %v", err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			_ = d.Close(ctx)
		})
		return d, &cfg
	}
}
