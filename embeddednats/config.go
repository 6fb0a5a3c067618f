package embeddednats

import (
	"fmt"
	"net"
	"regexp"
	"strings"
	"time"

	"github.com/msgplatform/platform/internal/tlsconf"
	"github.com/msgplatform/platform/internal/validate"
)

// Region names the cluster a node belongs to and its JetStream domain. Two
// regions are two independent clusters with independent meta groups.
type Region struct {
	// Name is the region's short name, e.g. "eu". It is used as the
	// default cluster name and JetStream domain.
	Name string `mapstructure:"name"`
	// Cluster is the nats cluster name (default: Name).
	Cluster string `mapstructure:"cluster"`
	// Domain is the JetStream domain (default: Name).
	Domain string `mapstructure:"domain"`
}

// EnsureDefaults fills Cluster and Domain from Name.
func (r *Region) EnsureDefaults() {
	if r.Name == "" {
		r.Name = "local"
	}
	if r.Cluster == "" {
		r.Cluster = r.Name
	}
	if r.Domain == "" {
		r.Domain = r.Name
	}
}

// Durability is the claim an acknowledged publish makes.
type Durability struct {
	// SyncAlways fsyncs every write before it is acknowledged. Default
	// true: an ack then survives a simultaneous power loss of every node.
	// false: an ack survives the loss of any minority of nodes, but a
	// correlated power loss may lose up to SyncInterval of acked writes.
	SyncAlways bool `mapstructure:"sync_always"`
	// SyncInterval is how often data is fsynced when SyncAlways is false
	// (nats-server default 2m).
	SyncInterval time.Duration `mapstructure:"sync_interval"`
	// Replicas is the default replica count for platform streams (3).
	Replicas int `mapstructure:"replicas"`
}

// ensureDefaults fills a zero SyncInterval or Replicas with
// DefaultConfig's.
func (d *Durability) ensureDefaults() {
	def := DefaultConfig().Durability
	if d.SyncInterval == 0 {
		d.SyncInterval = def.SyncInterval
	}
	if d.Replicas == 0 {
		d.Replicas = def.Replicas
	}
}

// ClusterListen is where a node listens for routes from its peers.
type ClusterListen struct {
	Host string `mapstructure:"host"`
	Port int    `mapstructure:"port"` // -1: pick a free port
	// Advertise is the host:port other nodes should dial (default: the
	// listen address).
	Advertise string `mapstructure:"advertise"`
	// Routes are the nats-route://host:port URLs of the other nodes.
	Routes []string `mapstructure:"routes"`
	// TLS of the routes, both the listener and the routes this node
	// dials (the certificate must name the address the other nodes dial,
	// Advertise or Routes). Routes always authenticate with credentials
	// derived from the trust material (Trust.RouteCredentials); with
	// TLS.Verify they must also present a certificate of TLS.CAFile
	// (mTLS).
	TLS tlsconf.Config `mapstructure:"tls"`
}

// Config is the configuration of one Node.
type Config struct {
	// Name is the server name, unique within the region.
	Name   string `mapstructure:"name"`
	Region Region `mapstructure:"region"`
	// Host and Port are the client listener (port -1: pick a free port).
	Host string `mapstructure:"host"`
	Port int    `mapstructure:"port"`
	// TLS of the client listener: with it, every client must speak TLS;
	// with TLS.Verify, it must also present a certificate of TLS.CAFile
	// (mTLS). The platform's own connections dial with ClientTLS.
	TLS tlsconf.Config `mapstructure:"tls"`
	// NoAdvertise stops the node from telling clients the addresses of its
	// peers (use it when clients reach the nodes through mapped ports or
	// a load balancer, and the peers' own addresses mean nothing to them).
	NoAdvertise bool `mapstructure:"no_advertise"`
	// Cluster is the route listener. A zero Port means a standalone node
	// (no cluster); JetStream then runs without a meta group.
	Cluster ClusterListen `mapstructure:"cluster"`
	// StoreDir holds the JetStream store and the account resolver.
	StoreDir string `mapstructure:"store_dir"`
	// MaxMemory and MaxStore bound JetStream (0: nats-server defaults).
	MaxMemory int64 `mapstructure:"max_memory"`
	MaxStore  int64 `mapstructure:"max_store"`
	// Tags are placement tags (lower-case).
	Tags       []string   `mapstructure:"tags"`
	Durability Durability `mapstructure:"durability"`
	// Leaf links this node to other regions (leaf.go).
	Leaf Leaf `mapstructure:"leaf"`
	// LameDuck is how long Close spreads client disconnects over.
	LameDuck time.Duration `mapstructure:"lame_duck"`
	// ReadyTimeout bounds Start's wait for readiness.
	ReadyTimeout time.Duration `mapstructure:"ready_timeout"`
	// Log turns on the nats-server logger (notices and errors).
	Log bool `mapstructure:"log"`
}

// DefaultConfig returns a single standalone node on 127.0.0.1:4222 with the
// documented durability defaults (replicas 3, SyncAlways).
func DefaultConfig() Config {
	c := Config{
		Name:     "n1",
		Region:   Region{Name: "local"},
		Host:     "127.0.0.1",
		Port:     4222,
		Cluster:  ClusterListen{Host: "127.0.0.1"},
		StoreDir: "data/n1",
		Durability: Durability{
			SyncAlways:   true,
			SyncInterval: 2 * time.Minute,
			Replicas:     3,
		},
		LameDuck:     10 * time.Second,
		ReadyTimeout: 30 * time.Second,
	}
	c.Region.EnsureDefaults()
	return c
}

// EnsureDefaults fills zero fields with their defaults.
func (c *Config) EnsureDefaults() {
	d := DefaultConfig()
	c.Region.EnsureDefaults()
	if c.Host == "" {
		c.Host = d.Host
	}
	if c.Cluster.Host == "" {
		c.Cluster.Host = c.Host
	}
	c.Durability.ensureDefaults()
	if c.LameDuck == 0 {
		c.LameDuck = d.LameDuck
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = d.ReadyTimeout
	}
}

// Clustered reports whether the node joins a cluster.
func (c *Config) Clustered() bool { return c.Cluster.Port != 0 }

var (
	nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)
	tagRE  = regexp.MustCompile(`^[a-z0-9][a-z0-9:_.-]*$`)
)

// Validate reports every problem with c at once.
func (c *Config) Validate() error {
	var p validate.Problems
	c.validateInto(&p)
	return p.Err(ErrInvalidConfig)
}

func (c *Config) validateInto(p *validate.Problems) {
	if !nameRE.MatchString(c.Name) {
		p.Addf("name", "must be 1-64 letters, digits, '-' or '_', got %q", c.Name)
	}
	validateRegion(p, "region", c.Region)
	if net.ParseIP(c.Host) == nil && c.Host != "localhost" {
		p.Addf("host", "must be an IP address or localhost, got %q", c.Host)
	}
	validatePort(p, "port", c.Port)
	c.TLS.ValidateServer(p, "tls")
	if c.Clustered() {
		c.Cluster.TLS.ValidateServer(p, "cluster.tls")
		validatePort(p, "cluster.port", c.Cluster.Port)
		if net.ParseIP(c.Cluster.Host) == nil && c.Cluster.Host != "localhost" {
			p.Addf("cluster.host", "must be an IP address or localhost, got %q", c.Cluster.Host)
		}
		for i, r := range c.Cluster.Routes {
			if !strings.HasPrefix(r, "nats-route://") && !strings.HasPrefix(r, "nats://") {
				p.Addf(fmt.Sprintf("cluster.routes[%d]", i), "must be a nats-route://host:port URL, got %q", r)
			}
		}
	} else if len(c.Cluster.Routes) > 0 {
		p.Addf("cluster.port", "routes are set but no cluster port: set cluster.port to join a cluster")
	}
	if c.StoreDir == "" {
		p.Addf("store_dir", "must be set")
	}
	if c.MaxMemory < 0 {
		p.Addf("max_memory", "must be >= 0, got %d", c.MaxMemory)
	}
	if c.MaxStore < 0 {
		p.Addf("max_store", "must be >= 0, got %d", c.MaxStore)
	}
	for i, t := range c.Tags {
		if !tagRE.MatchString(t) {
			p.Addf(fmt.Sprintf("tags[%d]", i), "must be lower-case letters, digits and ':_.-', got %q", t)
		}
	}
	validateDurability(p, "durability", c.Durability)
	validateLeaf(p, "leaf", c.Leaf)
	if c.LameDuck < 0 {
		p.Addf("lame_duck", "must be >= 0, got %s", c.LameDuck)
	}
	if c.ReadyTimeout <= 0 {
		p.Addf("ready_timeout", "must be > 0, got %s", c.ReadyTimeout)
	}
}

func validateRegion(p *validate.Problems, key string, r Region) {
	if !nameRE.MatchString(r.Name) {
		p.Addf(key+".name", "must be 1-64 letters, digits, '-' or '_', got %q", r.Name)
	}
	if !nameRE.MatchString(r.Cluster) {
		p.Addf(key+".cluster", "must be 1-64 letters, digits, '-' or '_', got %q", r.Cluster)
	}
	if !nameRE.MatchString(r.Domain) || strings.ContainsAny(r.Domain, ".*>") {
		p.Addf(key+".domain", "must be 1-64 letters, digits, '-' or '_', got %q", r.Domain)
	}
}

func validateDurability(p *validate.Problems, key string, d Durability) {
	if d.Replicas < 1 || d.Replicas > 5 {
		p.Addf(key+".replicas", "must be 1..5, got %d", d.Replicas)
	}
	if !d.SyncAlways && d.SyncInterval <= 0 {
		p.Addf(key+".sync_interval", "must be > 0 when sync_always is false, got %s", d.SyncInterval)
	}
}

func validatePort(p *validate.Problems, key string, port int) {
	if port != -1 && (port < 1 || port > 65535) {
		p.Addf(key, "must be 1..65535 (or -1 for any free port), got %d", port)
	}
}

// FabricConfig describes N nodes of one cluster run in one process, for
// development and tests.
type FabricConfig struct {
	Region Region `mapstructure:"region"`
	// Nodes is the number of nodes (1..9); 3 gives R3 streams.
	Nodes int    `mapstructure:"nodes"`
	Host  string `mapstructure:"host"`
	// Port is the client port of the first node; node i listens on
	// Port+i. -1 picks free ports.
	Port int `mapstructure:"port"`
	// ClusterPort is the route port of the first node; node i listens on
	// ClusterPort+i. -1 picks free ports.
	ClusterPort int `mapstructure:"cluster_port"`
	// TLS of the nodes' client listeners (one certificate for all of
	// them); routes stay on Host, authenticated by the trust's route
	// credentials.
	TLS tlsconf.Config `mapstructure:"tls"`
	// DataDir holds one store directory per node (DataDir/<node name>).
	DataDir    string        `mapstructure:"data_dir"`
	Durability Durability    `mapstructure:"durability"`
	LameDuck   time.Duration `mapstructure:"lame_duck"`
	Log        bool          `mapstructure:"log"`
}

// DefaultFabricConfig is the dev fabric: 3 nodes, client port 4222 on the
// first node, routes on 6222..6224.
func DefaultFabricConfig() FabricConfig {
	d := DefaultConfig()
	return FabricConfig{
		Region:      d.Region,
		Nodes:       3,
		Host:        "127.0.0.1",
		Port:        4222,
		ClusterPort: 6222,
		DataDir:     "data",
		Durability:  d.Durability,
		LameDuck:    2 * time.Second,
	}
}

// EnsureDefaults fills zero fields with their defaults.
func (c *FabricConfig) EnsureDefaults() {
	d := DefaultFabricConfig()
	c.Region.EnsureDefaults()
	if c.Nodes == 0 {
		c.Nodes = d.Nodes
	}
	if c.Host == "" {
		c.Host = d.Host
	}
	c.Durability.ensureDefaults()
	if c.LameDuck == 0 {
		c.LameDuck = d.LameDuck
	}
}

// Validate reports every problem with c at once.
func (c *FabricConfig) Validate() error {
	var p validate.Problems
	validateRegion(&p, "region", c.Region)
	if c.Nodes < 1 || c.Nodes > 9 {
		p.Addf("nodes", "must be 1..9, got %d", c.Nodes)
	}
	if net.ParseIP(c.Host) == nil && c.Host != "localhost" {
		p.Addf("host", "must be an IP address or localhost, got %q", c.Host)
	}
	validatePort(&p, "port", c.Port)
	c.TLS.ValidateServer(&p, "tls")
	if c.Port > 0 && c.Port+c.Nodes-1 > 65535 {
		p.Addf("port", "port+nodes-1 must be <= 65535, got %d", c.Port+c.Nodes-1)
	}
	if c.Nodes > 1 {
		validatePort(&p, "cluster_port", c.ClusterPort)
	}
	if c.DataDir == "" {
		p.Addf("data_dir", "must be set")
	}
	validateDurability(&p, "durability", c.Durability)
	if c.Durability.Replicas > c.Nodes {
		p.Addf("durability.replicas", "must be <= nodes (%d), got %d", c.Nodes, c.Durability.Replicas)
	}
	return p.Err(ErrInvalidConfig)
}
