package embeddednats

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// Fabric is N nodes of one region's cluster run in one process: the dev
// fabric of conf/dev.yaml, and what tests start through natstest.
type Fabric struct {
	cfg   FabricConfig
	trust *Trust
	nodes []*Node
}

// NewFabric builds (but does not start) the nodes of cfg. Free ports are
// picked now for any port given as -1, so a node restarted later comes back
// on the same address.
func NewFabric(cfg FabricConfig, trust *Trust) (*Fabric, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	configs, err := cfg.NodeConfigs()
	if err != nil {
		return nil, err
	}
	return NewFabricNodes(cfg, configs, trust)
}

// StartFabric builds and starts the nodes of cfg. Free ports are picked by
// listening and closing, so another process can take one before its node
// binds it; when cfg asks for picked ports (-1) and a node finds its port
// taken, the fabric is built again on fresh ports, up to three times.
func StartFabric(ctx context.Context, cfg FabricConfig, trust *Trust) (*Fabric, error) {
	picked := cfg.Port < 0 || cfg.ClusterPort < 0
	for attempt := 1; ; attempt++ {
		f, err := NewFabric(cfg, trust)
		if err != nil {
			return nil, err
		}
		err = f.Start(ctx)
		if err == nil {
			return f, nil
		}
		if !picked || !errors.Is(err, ErrPortInUse) || attempt == 3 {
			return nil, err
		}
	}
}

// NewFabricNodes builds a fabric from explicit node configurations (tests
// use it to route the cluster through fault-injecting proxies). With
// cfg.TLS, it sets trust.ClientTLS when unset, so Connect and every
// connection made with trust dial the TLS client ports.
func NewFabricNodes(cfg FabricConfig, configs []Config, trust *Trust) (*Fabric, error) {
	if trust != nil && trust.ClientTLS == nil && cfg.TLS.Enabled() {
		tc, err := cfg.TLS.Internal()
		if err != nil {
			return nil, fmt.Errorf("embeddednats: fabric tls: %w", err)
		}
		trust.ClientTLS = tc
	}
	f := &Fabric{cfg: cfg, trust: trust}
	for _, nc := range configs {
		n, err := NewNode(nc, trust)
		if err != nil {
			return nil, err
		}
		f.nodes = append(f.nodes, n)
	}
	return f, nil
}

// NodeConfigs derives the configuration of every node of the fabric.
func (c FabricConfig) NodeConfigs() ([]Config, error) {
	c.EnsureDefaults()
	clientPorts, err := ports(c.Host, c.Port, c.Nodes)
	if err != nil {
		return nil, err
	}
	var routePorts []int
	if c.Nodes > 1 {
		if routePorts, err = ports(c.Host, c.ClusterPort, c.Nodes); err != nil {
			return nil, err
		}
	}
	out := make([]Config, c.Nodes)
	for i := range out {
		nc := DefaultConfig()
		nc.Name = fmt.Sprintf("%s-n%d", c.Region.Name, i+1)
		nc.Region = c.Region
		nc.Host = c.Host
		nc.Port = clientPorts[i]
		nc.TLS = c.TLS
		nc.StoreDir = filepath.Join(c.DataDir, nc.Name)
		nc.Durability = c.Durability
		nc.LameDuck = c.LameDuck
		nc.Log = c.Log
		nc.Cluster.Host = c.Host
		if c.Nodes > 1 {
			nc.Cluster.Port = routePorts[i]
			for j, p := range routePorts {
				if j != i {
					nc.Cluster.Routes = append(nc.Cluster.Routes, "nats-route://"+net.JoinHostPort(c.Host, strconv.Itoa(p)))
				}
			}
		}
		out[i] = nc
	}
	return out, nil
}

// ports returns n ports: base, base+1, ... or, for base -1, n free ports.
func ports(host string, base, n int) ([]int, error) {
	out := make([]int, n)
	if base > 0 {
		for i := range out {
			out[i] = base + i
		}
		return out, nil
	}
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for i := range out {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("embeddednats: pick a free port: %w", err)
		}
		ls = append(ls, l)
		out[i] = l.Addr().(*net.TCPAddr).Port
	}
	return out, nil
}

// Start launches every node and waits until all are ready.
func (f *Fabric) Start(ctx context.Context) error {
	for _, n := range f.nodes {
		if err := n.Launch(); err != nil {
			f.Close(context.Background())
			return err
		}
	}
	return f.WaitReady(ctx)
}

// WaitReady waits until every running node is ready and, when all nodes
// run, until the meta leader knows every one of them as a current peer (a
// stream placed before that fails with "no suitable peers").
func (f *Fabric) WaitReady(ctx context.Context) error {
	if err := f.waitNodesReady(ctx); err != nil {
		return err
	}
	return f.waitMetaPeers(ctx)
}

func (f *Fabric) waitMetaPeers(ctx context.Context) error {
	if len(f.nodes) < 2 {
		return nil
	}
	for _, n := range f.nodes {
		if n.Server() == nil {
			return nil // a node is down on purpose
		}
	}
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		current := 0
		for _, n := range f.nodes {
			s := n.Server()
			if s == nil {
				continue
			}
			jsz, err := s.Jsz(nil)
			if err != nil || jsz.Meta == nil || jsz.Meta.Leader != s.Name() {
				continue
			}
			current = 1
			for _, r := range jsz.Meta.Replicas {
				if r.Current && !r.Offline {
					current++
				}
			}
		}
		if current == len(f.nodes) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: meta leader sees %d of %d nodes current", ErrNotReady, current, len(f.nodes))
		case <-tick.C:
		}
	}
}

func (f *Fabric) waitNodesReady(ctx context.Context) error {
	return onEveryNode(f.nodes, func(n *Node) error {
		if n.Server() == nil {
			return nil
		}
		return n.WaitReady(ctx)
	})
}

// onEveryNode runs fn on every node at once and returns when all have
// returned, with every error they returned.
func onEveryNode(nodes []*Node, fn func(n *Node) error) error {
	var wg sync.WaitGroup
	errs := make([]error, len(nodes))
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(n)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Nodes returns the fabric's nodes, in order.
func (f *Fabric) Nodes() []*Node { return f.nodes }

// Node returns node i (0-based).
func (f *Fabric) Node(i int) *Node { return f.nodes[i] }

// Trust returns the fabric's trust material.
func (f *Fabric) Trust() *Trust { return f.trust }

// Config returns the fabric's configuration (with defaults filled in).
func (f *Fabric) Config() FabricConfig { return f.cfg }

// ClientURLs returns the comma-separated client URLs of every node, the
// form nats.Connect accepts for a cluster.
func (f *Fabric) ClientURLs() string {
	urls := make([]string, len(f.nodes))
	for i, n := range f.nodes {
		urls[i] = n.ClientURL()
	}
	return strings.Join(urls, ",")
}

// Connect opens an admin connection to the fabric (any node).
func (f *Fabric) Connect(opts ...nats.Option) (*nats.Conn, error) {
	return ConnectAdmin(f.trust, f.ClientURLs(), opts...)
}

// Close drains and stops every node, bounded by ctx.
func (f *Fabric) Close(ctx context.Context) error {
	return onEveryNode(f.nodes, func(n *Node) error { return n.Close(ctx) })
}
