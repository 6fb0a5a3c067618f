package natstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/internal/tlsconf"
)

// Fabric is a running in-process cluster for a test.
type Fabric struct {
	*embeddednats.Fabric
	t   testing.TB
	net *routeNet
}

// Option changes how RunFabric builds the fabric.
type Option func(*embeddednats.FabricConfig)

// WithSyncAlways sets the durability mode (the default is the product's
// default, SyncAlways on).
func WithSyncAlways(on bool) Option {
	return func(c *embeddednats.FabricConfig) { c.Durability.SyncAlways = on }
}

// WithRegion sets the region name (cluster name and JetStream domain).
func WithRegion(name string) Option {
	return func(c *embeddednats.FabricConfig) { c.Region = embeddednats.Region{Name: name} }
}

// WithLog turns on the nats-server logs.
func WithLog() Option {
	return func(c *embeddednats.FabricConfig) { c.Log = true }
}

// WithDataDir places the stores in dir instead of a fresh t.TempDir().
func WithDataDir(dir string) Option {
	return func(c *embeddednats.FabricConfig) { c.DataDir = dir }
}

// WithTLS puts TLS on the nodes' client ports (fabric.tls); the fabric's
// own connections (Conn, NodeConn, JetStream) dial with it.
func WithTLS(c tlsconf.Config) Option {
	return func(fc *embeddednats.FabricConfig) { fc.TLS = c }
}

// RunFabric starts an n-node cluster (n = 1: a standalone node) and stops it
// when the test ends. Replicas default to min(3, n).
func RunFabric(t testing.TB, n int, opts ...Option) *Fabric {
	t.Helper()
	cfg := embeddednats.DefaultFabricConfig()
	cfg.Nodes = n
	cfg.Port = -1
	cfg.ClusterPort = -1
	cfg.DataDir = t.TempDir()
	cfg.Region = embeddednats.Region{Name: "test"}
	cfg.LameDuck = 500 * time.Millisecond
	cfg.Durability.Replicas = min(3, n)
	for _, o := range opts {
		o(&cfg)
	}
	cfg.EnsureDefaults()
	trust := Trust(t, cfg.DataDir)
	var err error
	if trust.ClientTLS, err = cfg.TLS.Internal(); err != nil {
		t.Fatalf("natstest: tls: %v", err)
	}
	// Free ports are picked by listening and closing, so a test running in
	// parallel can take one before the node binds it: try again with fresh
	// ports when that happens.
	for attempt := 1; ; attempt++ {
		f, err := startFabric(t, cfg, trust, n)
		if err == nil {
			return f
		}
		if !errors.Is(err, embeddednats.ErrPortInUse) || attempt == 3 {
			t.Fatalf("natstest: start fabric: %v", err)
		}
		t.Logf("natstest: %v; retrying with other ports", err)
	}
}

func startFabric(t testing.TB, cfg embeddednats.FabricConfig, trust *embeddednats.Trust, n int) (*Fabric, error) {
	configs, err := cfg.NodeConfigs()
	if err != nil {
		return nil, err
	}
	f := &Fabric{t: t, net: newRouteNet()}
	if n > 1 {
		// Front every cluster port with a proxy; nodes dial and advertise
		// the proxies, so Isolate can cut a node off its peers.
		proxyAddrs := make([]string, n)
		for i := range configs {
			target := net.JoinHostPort(configs[i].Cluster.Host, strconv.Itoa(configs[i].Cluster.Port))
			addr, err := f.net.listen(t, i, target)
			if err != nil {
				f.net.close()
				return nil, fmt.Errorf("route proxy: %w", err)
			}
			proxyAddrs[i] = addr
		}
		for i := range configs {
			configs[i].Cluster.Advertise = proxyAddrs[i]
			configs[i].Cluster.Routes = nil
			for j, a := range proxyAddrs {
				if j != i {
					configs[i].Cluster.Routes = append(configs[i].Cluster.Routes, "nats-route://"+a)
				}
			}
		}
	}
	fab, err := embeddednats.NewFabricNodes(cfg, configs, trust)
	if err != nil {
		f.net.close()
		return nil, err
	}
	f.Fabric = fab
	f.net.idToNode = f.nodeByServerID
	t.Cleanup(f.net.close) // registered first: runs once the fabric closed
	if err := start(t, fab, 60*time.Second); err != nil {
		f.net.close()
		return nil, err
	}
	return f, nil
}

func (f *Fabric) nodeByServerID(id string) int {
	for i, n := range f.Nodes() {
		if s := n.Server(); s != nil && s.ID() == id {
			return i
		}
	}
	return -1
}

// Conn returns an admin connection to the whole fabric that reconnects
// forever and is closed when the test ends.
func (f *Fabric) Conn(opts ...nats.Option) *nats.Conn {
	f.t.Helper()
	all := append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}, opts...)
	nc, err := f.Connect(all...)
	if err != nil {
		f.t.Fatalf("natstest: connect: %v", err)
	}
	f.t.Cleanup(nc.Close)
	return nc
}

// NodeConn returns an admin connection to node i only (no reconnect to
// other nodes).
func (f *Fabric) NodeConn(i int, opts ...nats.Option) *nats.Conn {
	f.t.Helper()
	nc, err := embeddednats.ConnectAdmin(f.Trust(), f.Node(i).ClientURL(), append([]nats.Option{nats.NoReconnect()}, opts...)...)
	if err != nil {
		f.t.Fatalf("natstest: connect node %d: %v", i, err)
	}
	f.t.Cleanup(nc.Close)
	return nc
}

// JetStream returns a JetStream context on a fresh admin connection.
func (f *Fabric) JetStream() jetstream.JetStream {
	f.t.Helper()
	js, err := jetstream.New(f.Conn())
	if err != nil {
		f.t.Fatalf("natstest: jetstream: %v", err)
	}
	return js
}

// Kill stops node i at once (a crash, no lame duck).
func (f *Fabric) Kill(i int) {
	f.Node(i).Kill()
}

// Restart starts node i again (same name, ports and store) and waits until
// the fabric is ready and node i has caught up (see WaitHealthy).
func (f *Fabric) Restart(i int) {
	f.t.Helper()
	if err := f.Node(i).Launch(); err != nil {
		f.t.Fatalf("natstest: restart node %d: %v", i, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := f.WaitReady(ctx); err != nil {
		f.t.Fatalf("natstest: restart node %d: %v", i, err)
	}
	f.WaitHealthy(i)
}

// WaitHealthy waits until node i reports healthy: its JetStream meta,
// streams and consumers are current (nats-server's /healthz). Killing
// another node before this can leave assets without quorum.
func (f *Fabric) WaitHealthy(i int) {
	f.t.Helper()
	WaitFor(f.t, 60*time.Second, func() error {
		s := f.Node(i).Server()
		if s == nil {
			return fmt.Errorf("node %d is not running", i)
		}
		if h := s.Healthz(nil); h.Status != "ok" {
			return fmt.Errorf("node %d: %s %s", i, h.Status, h.Error)
		}
		return nil
	})
}

// Isolate cuts node i off from its peers: its route connections are closed
// and new ones refused until Heal. The node and its clients keep running.
func (f *Fabric) Isolate(i int) { f.net.isolate(i, true) }

// Heal lets node i reach its peers again.
func (f *Fabric) Heal(i int) { f.net.isolate(i, false) }

// Delay holds every route byte node from sends to node to for d (0 ends
// it), in order: a congested or distant link, on which interest (RS+) and
// messages arrive late but never out of order.
func (f *Fabric) Delay(from, to int, d time.Duration) { f.net.delay(from, to, d) }

// WaitFor polls cond every 20ms until it returns nil or timeout passes,
// then fails the test with cond's last error.
func WaitFor(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("natstest: condition not met after %s: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitReplicasCurrent waits until every replica of stream is current with
// its leader and then one more tick of the server's direct-access monitor
// (2 s in nats-server 2.15), after which every replica serves direct gets
// on its own: the point from which committed data stays readable with the
// leader gone.
func (f *Fabric) WaitReplicasCurrent(js jetstream.JetStream, stream string) {
	f.t.Helper()
	WaitFor(f.t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		info := s.CachedInfo()
		if info.Cluster == nil || info.Cluster.Leader == "" {
			return fmt.Errorf("stream %s has no leader", stream)
		}
		for _, r := range info.Cluster.Replicas {
			if !r.Current || r.Lag > 0 {
				return fmt.Errorf("stream %s replica %s not current (lag %d)", stream, r.Name, r.Lag)
			}
		}
		return nil
	})
	time.Sleep(2500 * time.Millisecond)
}
