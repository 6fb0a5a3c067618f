package conf

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/internal/tlsconf"
	"github.com/msgplatform/platform/internal/validate"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/canary"
	"github.com/msgplatform/platform/tenancy"
)

// Modes of platformd.
const (
	// ModeFabric runs Fabric.Nodes nodes of one region in one process, for
	// development.
	ModeFabric = "fabric"
	// ModeNode runs one node (Node) of a multi-host cluster.
	ModeNode = "node"
	// ModeRegions runs several regions in one process (regions:), each
	// its own cluster and JetStream domain, linked by leafnodes; for
	// development of multi-region features (conf/dev-regions.yaml).
	ModeRegions = "regions"
)

// DefaultDataDir is the data directory unless data_dir says otherwise.
const DefaultDataDir = "data"

// Config is the whole configuration of platformd. Its mapstructure tags are
// the keys of the YAML file.
type Config struct {
	// Mode is ModeFabric or ModeNode.
	Mode string `mapstructure:"mode"`
	// DataDir holds trust/, creds/ and, unless fabric.data_dir or
	// node.store_dir say otherwise, the node stores (<data_dir>/<node name>).
	DataDir string `mapstructure:"data_dir"`
	// Fabric is used in mode fabric, Node in mode node.
	Fabric embeddednats.FabricConfig `mapstructure:"fabric"`
	Node   embeddednats.Config       `mapstructure:"node"`
	// Regions is used in mode regions; its peers (regions.peers) in mode
	// node.
	Regions   RegionsConfig   `mapstructure:"regions"`
	HTTP      HTTPConfig      `mapstructure:"http"`
	Control   ControlConfig   `mapstructure:"control"`
	Reconcile ReconcileConfig `mapstructure:"reconcile"`
	// Canary is platformd's canary (canary.interval, canary.tolerance).
	Canary canary.Config `mapstructure:"canary"`
	// Catalog is the declared topics, queues and groups: the top-level
	// keys topics:, queues: and groups:, each a map keyed by name.
	Catalog platform.Catalog `mapstructure:",squash"`
	// Tenants are created at start if they do not exist (tenants:, a map
	// keyed by name, e.g. tenants.harbor-retail.quota.publish_rate).
	Tenants map[string]tenancy.Spec `mapstructure:"tenants"`
	// Insecure allows, in mode node, plaintext listeners (client, routes,
	// leafnodes, HTTP) on non-loopback addresses (tls.go).
	Insecure bool `mapstructure:"insecure"`
}

// HTTPConfig is the HTTP listener for /healthz, /readyz and /metrics.
type HTTPConfig struct {
	// Listen is host:port; "" or "off" disables the listener.
	Listen string `mapstructure:"listen"`
	// TLS serves HTTPS (with verify, clients need a certificate of
	// ca_file).
	TLS tlsconf.Config `mapstructure:"tls"`
}

// Enabled reports whether the HTTP listener runs.
func (h HTTPConfig) Enabled() bool { return h.Listen != "" && h.Listen != "off" }

// ControlConfig is the control API served over NATS (platformctl's).
type ControlConfig struct {
	// Enabled serves the control API (default true).
	Enabled bool `mapstructure:"enabled"`
}

// ReconcileConfig guards how the declared catalog is applied at start.
type ReconcileConfig struct {
	// AllowReducedReplicas lets reconcile lower a topic's or queue's
	// replicas below platform.DefaultReplicas (3).
	AllowReducedReplicas bool `mapstructure:"allow_reduced_replicas"`
	// AllowCleanupChange lets reconcile switch an existing topic between
	// cleanup delete and compact (it changes what history is kept).
	AllowCleanupChange bool `mapstructure:"allow_cleanup_change"`
}

// DefaultConfig returns the development configuration: a 3-node fabric of
// region local on 127.0.0.1:4222..4224 with routes on 6222..6224, data in
// ./data, HTTP on 127.0.0.1:8080, the control API on, and no catalog.
// Derived fields (node stores, cluster and domain names) are filled.
func DefaultConfig() Config {
	c := baseConfig()
	c.EnsureDefaults()
	return c
}

// baseConfig is DefaultConfig before EnsureDefaults: the fields that
// EnsureDefaults derives from others (fabric.data_dir and node.store_dir
// from data_dir, region cluster and domain from the region name,
// node.cluster.host from node.host) are left empty, so that a file or the
// environment setting data_dir or region.name moves them too. Load decodes
// onto it.
func baseConfig() Config {
	c := Config{
		Mode:    ModeFabric,
		DataDir: DefaultDataDir,
		Fabric:  embeddednats.DefaultFabricConfig(),
		Node:    embeddednats.DefaultConfig(),
		HTTP:    HTTPConfig{Listen: "127.0.0.1:8080"},
		Control: ControlConfig{Enabled: true},
		Canary:  canary.DefaultConfig(),
	}
	c.Fabric.DataDir = ""
	c.Fabric.Region = embeddednats.Region{Name: c.Fabric.Region.Name}
	c.Node.StoreDir = ""
	c.Node.Cluster.Host = ""
	c.Node.Region = embeddednats.Region{Name: c.Node.Region.Name}
	return c
}

// EnsureDefaults fills zero fields with their defaults: mode fabric,
// data_dir "data", fabric.data_dir = data_dir, node.store_dir =
// <data_dir>/<node name>, the embeddednats defaults of fabric and node, and
// each catalog entry's name from its key. HTTP.Listen and Control.Enabled
// are left alone: their zero values mean "off". Catalog numbers are left
// alone too: Load applies the platform defaults for omitted keys, and an
// explicit 0 must reach Validate.
func (c *Config) EnsureDefaults() {
	if c.Mode == "" {
		c.Mode = ModeFabric
	}
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir
	}
	if c.Fabric.DataDir == "" {
		c.Fabric.DataDir = c.DataDir
	}
	c.Fabric.EnsureDefaults()
	c.Node.EnsureDefaults()
	if len(c.Regions.Fabrics) == 0 {
		c.Regions.Fabrics = nil // "fabrics: []" and no key read the same
	}
	if len(c.Regions.Deny) == 0 {
		c.Regions.Deny = nil
	}
	c.Regions.ensurePeerDefaults()
	if len(c.Node.Leaf.Remotes) == 0 {
		c.Node.Leaf.Remotes = nil
	}
	for i := range c.Regions.Fabrics {
		f := &c.Regions.Fabrics[i]
		f.Region.EnsureDefaults()
		if f.DataDir == "" {
			f.DataDir = filepath.Join(c.DataDir, f.Region.Name)
		}
		f.EnsureDefaults()
	}
	if c.Node.StoreDir == "" && c.Node.Name != "" {
		c.Node.StoreDir = filepath.Join(c.DataDir, c.Node.Name)
	}
	for k, t := range c.Catalog.Topics {
		if t.Name == "" {
			t.Name = k
			c.Catalog.Topics[k] = t
		}
	}
	for k, q := range c.Catalog.Queues {
		if q.Name == "" {
			q.Name = k
			c.Catalog.Queues[k] = q
		}
	}
	for k, g := range c.Catalog.Groups {
		if g.Name == "" {
			g.Name = k
			c.Catalog.Groups[k] = g
		}
	}
	for k, t := range c.Tenants {
		if t.Name == "" {
			t.Name = k
			c.Tenants[k] = t
		}
	}
}

// Durability returns the durability of the active mode: fabric.durability
// in mode fabric, node.durability in mode node.
func (c *Config) Durability() embeddednats.Durability {
	if c.Mode == ModeNode {
		return c.Node.Durability
	}
	if c.Mode == ModeRegions && len(c.Regions.Fabrics) > 0 {
		return c.Regions.Fabrics[0].Durability
	}
	return c.Fabric.Durability
}

// Validate reports every problem with c at once, each keyed by its full
// path in the YAML file. Only the section of the active mode (fabric: or
// node:) is checked. The error is a *validate.Error wrapping ErrInvalid.
func (c *Config) Validate() error {
	var p validate.Problems
	c.validateInto(&p)
	return p.Err(ErrInvalid)
}

func (c *Config) validateInto(p *validate.Problems) {
	switch c.Mode {
	case ModeFabric:
		p.Merge("fabric", c.Fabric.Validate())
	case ModeNode:
		p.Merge("node", c.Node.Validate())
	case ModeRegions:
		p.Merge("regions", c.Regions.Validate())
	default:
		// (mode regions, for development of multi-region features, is
		// left out of the message: it is not a deployment mode.)
		p.Addf("mode", "must be %s or %s, got %q", ModeFabric, ModeNode, c.Mode)
	}
	p.Merge("regions", c.Regions.validatePeers(c.Mode, c.Node.Region))
	if c.DataDir == "" {
		p.Addf("data_dir", "must be set")
	}
	if c.HTTP.Enabled() {
		if _, _, err := splitListen(c.HTTP.Listen); err != nil {
			p.Addf("http.listen", "must be host:port (e.g. 127.0.0.1:8080), or off to disable, got %q (%v)", c.HTTP.Listen, err)
		}
		c.HTTP.TLS.ValidateServer(p, "http.tls")
	}
	c.validateTransport(p)
	p.Merge("canary", c.Canary.Validate())
	p.Merge("", c.Catalog.Validate())
	for _, k := range slices.Sorted(maps.Keys(c.Tenants)) {
		t := c.Tenants[k]
		if t.Name != k {
			p.Addf("tenants."+k+".name", "must equal its key %q, got %q", k, t.Name)
		}
		p.Merge("tenants."+k, t.Validate())
	}
	c.validatePlacement(p)
	c.validatePorts(p)
}

// validatePlacement checks that every declared replica can be placed: a
// fabric of N nodes holds at most N replicas, and a standalone node (no
// cluster port) only 1, as nats-server refuses replicas > 1 there.
func (c *Config) validatePlacement(p *validate.Problems) {
	var limit int
	var why string
	switch {
	case c.Mode == ModeFabric && c.Fabric.Nodes >= 1:
		limit = c.Fabric.Nodes
		why = fmt.Sprintf("must be <= fabric.nodes (%d)", limit)
	case c.Mode == ModeNode && !c.Node.Clustered():
		limit = 1
		why = "must be 1 on a standalone node (node.cluster.port is not set)"
		if c.Node.Durability.Replicas > 1 {
			p.Addf("node.durability.replicas", "%s, got %d", why, c.Node.Durability.Replicas)
		}
	default:
		return // a clustered node: the cluster size is not in this file
	}
	for _, k := range slices.Sorted(maps.Keys(c.Catalog.Topics)) {
		if r := c.Catalog.Topics[k].Replicas; r > limit {
			p.Addf("topics."+k+".replicas", "%s, got %d", why, r)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(c.Catalog.Queues)) {
		if r := c.Catalog.Queues[k].Replicas; r > limit {
			p.Addf("queues."+k+".replicas", "%s, got %d", why, r)
		}
	}
}

// portRange is a run of TCP ports a listener of this configuration binds.
type portRange struct {
	key        string // the key that sets it
	host       string
	first, end int // [first, end]
}

func (r portRange) String() string {
	if r.first == r.end {
		return fmt.Sprintf("%s (%d)", r.key, r.first)
	}
	return fmt.Sprintf("%s (%d..%d)", r.key, r.first, r.end)
}

// validatePorts reports two listeners of this configuration on one port.
func (c *Config) validatePorts(p *validate.Problems) {
	var rs []portRange
	add := func(key, host string, port, n int) {
		if port > 0 && n > 0 {
			rs = append(rs, portRange{key: key, host: host, first: port, end: port + n - 1})
		}
	}
	switch c.Mode {
	case ModeFabric:
		n := c.Fabric.Nodes
		add("fabric.port", c.Fabric.Host, c.Fabric.Port, n)
		if n > 1 {
			add("fabric.cluster_port", c.Fabric.Host, c.Fabric.ClusterPort, n)
		}
	case ModeNode:
		add("node.port", c.Node.Host, c.Node.Port, 1)
		if c.Node.Clustered() {
			add("node.cluster.port", c.Node.Cluster.Host, c.Node.Cluster.Port, 1)
		}
	}
	if c.HTTP.Enabled() {
		if host, port, err := splitListen(c.HTTP.Listen); err == nil {
			add("http.listen", host, port, 1)
		}
	}
	for i := 1; i < len(rs); i++ {
		for j := 0; j < i; j++ {
			a, b := rs[i], rs[j]
			if a.first <= b.end && b.first <= a.end && hostsOverlap(a.host, b.host) {
				p.Addf(a.key, "port overlaps %s: every listener needs its own port", b)
			}
		}
	}
}

// splitListen parses host:port with a numeric port 0..65535.
func splitListen(s string) (host string, port int, err error) {
	host, ps, err := net.SplitHostPort(s)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return "", 0, errors.New(ae.Err)
		}
		return "", 0, err
	}
	port, err = strconv.Atoi(ps)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("port must be 0..65535")
	}
	return host, port, nil
}

// hostsOverlap reports whether listeners on hosts a and b can collide on
// one port: the same address, or either is a wildcard.
func hostsOverlap(a, b string) bool {
	norm := func(h string) string {
		switch h {
		case "", "0.0.0.0", "::":
			return "*"
		case "localhost":
			return "127.0.0.1"
		}
		return h
	}
	a, b = norm(a), norm(b)
	return a == "*" || b == "*" || a == b
}
