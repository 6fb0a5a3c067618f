package embeddednats

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Node is one embedded nats-server with JetStream in operator mode.
type Node struct {
	cfg   Config
	trust *Trust

	// tls holds the listeners' TLS, built once so that a reload
	// (SetLeafDeny) hands the server the same configurations again.
	tls nodeTLS

	mu      sync.Mutex
	srv     *server.Server
	closed  bool
	leafGen int // generation of the link creds (leaf.go)
	// afterProbe, when set (tests), runs between the port probe and the
	// server's start: what another process taking a probed port looks
	// like.
	afterProbe func(*server.Options)
}

// NewNode validates cfg and prepares a node. Nothing listens until Start.
func NewNode(cfg Config, trust *Trust) (*Node, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if trust == nil {
		return nil, fmt.Errorf("%w: NewNode needs the installation's trust", ErrNoTrust)
	}
	nt, err := newNodeTLS(cfg)
	if err != nil {
		return nil, err
	}
	return &Node{cfg: cfg, trust: trust, tls: nt}, nil
}

// nodeTLS is the TLS of a node's listeners and leafnode remotes (nil:
// plaintext).
type nodeTLS struct {
	client, cluster, leaf, leafRemote *tls.Config
}

func newNodeTLS(c Config) (nodeTLS, error) {
	var t nodeTLS
	var err error
	if t.client, err = c.TLS.Server(); err != nil {
		return t, fmt.Errorf("embeddednats: tls: %w", err)
	}
	if c.Clustered() {
		if t.cluster, err = c.Cluster.TLS.Peer(); err != nil {
			return t, fmt.Errorf("embeddednats: cluster.tls: %w", err)
		}
	}
	if c.Leaf.Port != 0 {
		if t.leaf, err = c.Leaf.TLS.Server(); err != nil {
			return t, fmt.Errorf("embeddednats: leaf.tls: %w", err)
		}
	}
	if len(c.Leaf.Remotes) > 0 {
		if t.leafRemote, err = c.Leaf.TLS.Client(""); err != nil {
			return t, fmt.Errorf("embeddednats: leaf.tls: %w", err)
		}
	}
	return t, nil
}

// tlsTimeout bounds a TLS handshake on every listener, in seconds.
const tlsTimeout = 2.0

// Config returns the node's configuration (with defaults filled in).
func (n *Node) Config() Config { return n.cfg }

// Name returns the server name.
func (n *Node) Name() string { return n.cfg.Name }

// Start starts the server and returns when it is ready: clients can
// connect and JetStream has a meta leader. It fails with ErrNotReady when
// ctx or the configured ReadyTimeout expire first.
func (n *Node) Start(ctx context.Context) error {
	if err := n.Launch(); err != nil {
		return err
	}
	return n.WaitReady(ctx)
}

// readyPoll is how often Launch looks for a failed start while it waits
// for the server to accept clients.
const readyPoll = 50 * time.Millisecond

// Launch starts the server and waits only until it accepts clients. A
// cluster node cannot elect a meta leader alone; Fabric launches every node
// first and then waits for all of them.
func (n *Node) Launch() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return ErrClosed
	}
	if n.srv != nil && n.srv.Running() {
		return nil
	}
	opts, err := n.serverOptions()
	if err != nil {
		return err
	}
	if err := probePorts(opts); err != nil {
		return fmt.Errorf("embeddednats: %s: %w", n.cfg.Name, err)
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("embeddednats: %s: %w", n.cfg.Name, err)
	}
	watch := watchStart(s, opts, n.cfg.Log)
	if n.afterProbe != nil {
		n.afterProbe(opts)
	}
	go s.Start()
	deadline := time.Now().Add(n.cfg.ReadyTimeout)
	for !s.ReadyForConnections(readyPoll) {
		if fatal := watch.failure(); fatal != "" {
			s.Shutdown()
			return startError(n.cfg.Name, fatal)
		}
		if time.Now().After(deadline) {
			s.Shutdown()
			return fmt.Errorf("%w: %s: not accepting clients after %s", ErrNotReady, n.cfg.Name, n.cfg.ReadyTimeout)
		}
	}
	n.srv = s
	return nil
}

// probePorts checks that the client and route ports are free, so a port
// in use is reported by name instead of as a server that never gets ready.
func probePorts(opts *server.Options) error {
	check := func(what, host string, port int) error {
		if port <= 0 {
			return nil
		}
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return fmt.Errorf("%w: %s port %d on %s is not available: %v", ErrPortInUse, what, port, host, err)
		}
		return l.Close()
	}
	if err := check("client", opts.Host, opts.Port); err != nil {
		return err
	}
	return check("cluster", opts.Cluster.Host, opts.Cluster.Port)
}

func (n *Node) serverOptions() (*server.Options, error) {
	c := n.cfg
	if err := os.MkdirAll(c.StoreDir, 0o700); err != nil {
		return nil, fmt.Errorf("embeddednats: store dir: %w", err)
	}
	resolverDir := filepath.Join(c.StoreDir, "accounts")
	if err := os.MkdirAll(resolverDir, 0o700); err != nil {
		return nil, fmt.Errorf("embeddednats: resolver dir: %w", err)
	}
	opts := &server.Options{}
	if err := opts.ProcessConfigString(n.trust.serverConfig(resolverDir)); err != nil {
		return nil, fmt.Errorf("embeddednats: operator config: %w", err)
	}
	opts.ServerName = c.Name
	opts.Host = c.Host
	opts.Port = c.Port
	opts.JetStream = true
	opts.JetStreamDomain = c.Region.Domain
	opts.StoreDir = c.StoreDir
	opts.JetStreamMaxMemory = c.MaxMemory
	opts.JetStreamMaxStore = c.MaxStore
	opts.SyncAlways = c.Durability.SyncAlways
	opts.SyncInterval = c.Durability.SyncInterval
	opts.Tags = append(opts.Tags, c.Tags...)
	opts.Tags = append(opts.Tags, "region:"+c.Region.Name)
	opts.LameDuckDuration = c.LameDuck
	opts.LameDuckGracePeriod = c.LameDuck / 2
	opts.NoSigs = true
	opts.NoLog = !c.Log
	opts.MaxPayload = 8 << 20
	if n.tls.client != nil {
		opts.TLSConfig, opts.TLSTimeout, opts.TLSVerify = n.tls.client, tlsTimeout, c.TLS.Verify
	}
	if err := n.leafOptions(opts, n.leafGen); err != nil {
		return nil, err
	}
	if c.Clustered() {
		opts.Cluster.Name = c.Region.Cluster
		opts.Cluster.Host = c.Cluster.Host
		opts.Cluster.Port = c.Cluster.Port
		opts.Cluster.Advertise = c.Cluster.Advertise
		opts.Cluster.NoAdvertise = c.NoAdvertise
		// Routes authenticate: a process that dials the cluster port
		// without the installation's route credentials (and, with
		// cluster.tls.verify, a certificate of its CA) is refused before
		// it sees any interest or message.
		user, pass, err := n.trust.RouteCredentials()
		if err != nil {
			return nil, err
		}
		opts.Cluster.Username, opts.Cluster.Password = user, pass
		if n.tls.cluster != nil {
			opts.Cluster.TLSConfig, opts.Cluster.TLSTimeout = n.tls.cluster, tlsTimeout
		}
		for _, r := range c.Cluster.Routes {
			u, err := url.Parse(r)
			if err != nil {
				return nil, fmt.Errorf("embeddednats: route %q: %w", r, err)
			}
			if u.User == nil {
				u.User = url.UserPassword(user, pass)
			}
			opts.Routes = append(opts.Routes, u)
		}
	}
	return opts, nil
}

// WaitReady blocks until clients can connect and JetStream has a meta
// leader, or ctx (bounded by ReadyTimeout) ends.
func (n *Node) WaitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.ReadyTimeout)
	defer cancel()
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := n.Ready(); err == nil {
			return nil
		} else if errors.Is(err, ErrClosed) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %s: %v", ErrNotReady, n.cfg.Name, n.Ready())
		case <-tick.C:
		}
	}
}

// Ready returns nil when the node accepts clients and JetStream has a meta
// leader (or, standalone, JetStream is enabled), otherwise why not.
func (n *Node) Ready() error {
	s := n.Server()
	if s == nil {
		return ErrClosed
	}
	if !s.Running() || !s.ReadyForConnections(time.Millisecond) {
		return errors.New("not accepting clients")
	}
	if !s.JetStreamEnabled() {
		return errors.New("jetstream not enabled")
	}
	// The platform account must have JetStream before clients use it (it
	// is enabled when the account is first loaded from the resolver).
	acc, err := s.LookupAccount(n.trust.AdminAccount())
	if err != nil {
		return fmt.Errorf("platform account: %w", err)
	}
	if !acc.JetStreamEnabled() {
		return errors.New("jetstream not yet enabled for the platform account")
	}
	if !n.cfg.Clustered() {
		return nil
	}
	jsz, err := s.Jsz(nil)
	if err != nil {
		return err
	}
	if jsz.Meta == nil || jsz.Meta.Leader == "" {
		return errors.New("no jetstream meta leader")
	}
	return nil
}

// Server returns the running server, or nil when stopped.
func (n *Node) Server() *server.Server {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.srv == nil || !n.srv.Running() {
		return nil
	}
	return n.srv
}

// ClientURL returns the nats:// URL clients use to reach this node.
func (n *Node) ClientURL() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.srv != nil {
		if a, ok := n.srv.Addr().(*net.TCPAddr); ok && a != nil {
			return "nats://" + net.JoinHostPort(n.cfg.Host, strconv.Itoa(a.Port))
		}
	}
	return "nats://" + net.JoinHostPort(n.cfg.Host, strconv.Itoa(n.cfg.Port))
}

// ClusterURL returns the nats-route:// URL peers use to reach this node.
func (n *Node) ClusterURL() string {
	if n.cfg.Cluster.Advertise != "" {
		return "nats-route://" + n.cfg.Cluster.Advertise
	}
	return "nats-route://" + net.JoinHostPort(n.cfg.Cluster.Host, strconv.Itoa(n.cfg.Cluster.Port))
}

// Connect opens an admin connection (PLATFORM account) to this node.
func (n *Node) Connect(opts ...nats.Option) (*nats.Conn, error) {
	return ConnectAdmin(n.trust, n.ClientURL(), opts...)
}

// ClientTLS is the TLS the platform's own connections dial this node's
// client port with (nil: the port is plaintext); see
// tlsconf.Config.Internal. Whoever runs the node puts it in
// Trust.ClientTLS.
func (n *Node) ClientTLS() (*tls.Config, error) { return n.cfg.TLS.Internal() }

// Connect is the one way the platform dials its own nodes with nats.go:
// url with t.ClientTLS when set, then opts (credentials among them).
func Connect(t *Trust, url string, opts ...nats.Option) (*nats.Conn, error) {
	var all []nats.Option
	if t != nil && t.ClientTLS != nil {
		all = append(all, nats.Secure(t.ClientTLS))
	}
	return nats.Connect(url, append(all, opts...)...)
}

// ConnectAdmin connects to url as the platform admin user.
func ConnectAdmin(t *Trust, url string, opts ...nats.Option) (*nats.Conn, error) {
	return connectAs(t, url, t.AdminUserJWT, t.AdminUserSeed, "platform-admin", opts)
}

// ConnectSystem connects to url as the system account user.
func ConnectSystem(t *Trust, url string, opts ...nats.Option) (*nats.Conn, error) {
	return connectAs(t, url, t.SystemUserJWT, t.SystemUserSeed, "platform-system", opts)
}

// connectAs connects to url as the user of userJWT and seed, named name
// unless opts (applied after) say otherwise.
func connectAs(t *Trust, url, userJWT, seed, name string, opts []nats.Option) (*nats.Conn, error) {
	return Connect(t, url, append([]nats.Option{nats.UserJWTAndSeed(userJWT, seed), nats.Name(name)}, opts...)...)
}

// Close drains the node in lame-duck mode (clients are moved away and
// JetStream leaders are transferred), bounded by ctx, then shuts it down.
// Close is idempotent; it returns ctx.Err() if the drain was cut short.
func (n *Node) Close(ctx context.Context) error {
	n.mu.Lock()
	s := n.srv
	n.closed = true
	n.mu.Unlock()
	if s == nil || !s.Running() {
		return nil
	}
	done := make(chan struct{})
	go func() {
		s.LameDuckShutdown()
		close(done)
	}()
	select {
	case <-done:
		s.WaitForShutdown()
		return nil
	case <-ctx.Done():
		s.Shutdown()
		s.WaitForShutdown()
		return ctx.Err()
	}
}

// Kill stops the server at once, without lame duck: the in-process
// equivalent of a crash (the store is left as a crash leaves it, minus
// unflushed OS buffers). The node can be started again with Start.
func (n *Node) Kill() {
	n.mu.Lock()
	s := n.srv
	n.srv = nil
	n.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}
