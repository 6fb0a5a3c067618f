package tenancy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/internal/retry"
	"github.com/msgplatform/platform/internal/validate"
	"github.com/msgplatform/platform/internal/wire"
	"github.com/msgplatform/platform/platform/catalog"
)

// Config configures a Manager.
type Config struct {
	// URL is the client URL(s) of the cluster, comma-separated.
	URL string
	// Servers is how many nodes answer an account JWT update (the
	// cluster size).
	Servers int
	// Replicas of the registry bucket, the audit stream and tenants'
	// topics and queues by default (min(3, cluster size)).
	Replicas int
	// PushTimeout bounds the wait for the nodes' replies to an account
	// update (default 2s).
	PushTimeout time.Duration
	// LeaseTTL is how long a tenant's ingest lease lives without renewal
	// before a standby manager takes it over (default 3s); LeaseInterval
	// is the heartbeat that renews leases and syncs with the registry
	// (default 1s, at most a third of LeaseTTL).
	LeaseTTL      time.Duration
	LeaseInterval time.Duration
	Logger        *slog.Logger
	// PlatformConns is how many connections the platform itself may keep
	// in each tenant's account over the whole installation: per daemon,
	// its ingest runtime and its service users (redrive and its runs,
	// DLQ metrics); per node, its pull gate.
	// It is added to the tenant's connection quota in the account JWT
	// (nats-server counts every connection of the account), so the
	// platform never takes a connection the tenant's quota grants
	// (default (PlatformConnsPerDaemon + GateConnsPerNode) × Servers).
	PlatformConns int
	// Local are the nodes this manager's process runs: each tenant's
	// runtime keeps a pull gate on each (see gate). Empty: pulls are
	// gated on the ingest's connection.
	Local []LocalNode
}

// PlatformConnsPerDaemon is the connections one daemon keeps in a
// tenant's account: the ingest runtime's two (RuntimeConns), redrive's
// service, redrive's own for its runs (while one runs) and DLQ metrics.
// The pull gates add GateConnsPerNode per node the daemon runs.
const PlatformConnsPerDaemon = RuntimeConns + 3

// GateConnsPerNode is the connections a tenant's runtime keeps in the
// tenant's account per local node: its pull gate there.
const GateConnsPerNode = 1

// RuntimeConns is the connections of a tenant's runtime: one for
// JetStream requests, one the ingest forwards events on.
const RuntimeConns = 2

// EnsureDefaults fills zero fields.
func (c *Config) EnsureDefaults() {
	if c.Servers <= 0 {
		c.Servers = 1
	}
	if c.Replicas <= 0 {
		c.Replicas = min(3, c.Servers)
	}
	if c.PushTimeout <= 0 {
		c.PushTimeout = 2 * time.Second
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 3 * time.Second
	}
	if c.LeaseInterval <= 0 {
		c.LeaseInterval = min(time.Second, c.LeaseTTL/3)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.PlatformConns <= 0 {
		c.PlatformConns = (PlatformConnsPerDaemon + GateConnsPerNode) * c.Servers
	}
}

// Validate reports every problem.
func (c Config) Validate() error {
	var p validate.Problems
	if c.URL == "" {
		p.Addf("url", "must be set")
	}
	if c.Replicas > c.Servers {
		p.Addf("replicas", "must be <= servers (%d), got %d", c.Servers, c.Replicas)
	}
	if c.LeaseInterval*3 > c.LeaseTTL {
		p.Addf("lease_interval", "must be at most a third of lease_ttl (%s), got %s", c.LeaseTTL, c.LeaseInterval)
	}
	return p.Err(ErrInvalid)
}

// Manager creates and changes tenants, their users and objects, and runs
// the ingest of every active tenant. One per daemon.
type Manager struct {
	cfg      Config
	log      *slog.Logger
	trust    *embeddednats.Trust
	opSigner nkeys.KeyPair
	seal     *sealer

	nc  *nats.Conn          // PLATFORM account
	js  jetstream.JetStream // PLATFORM account
	sys *nats.Conn          // SYS account
	reg *registry
	den *nats.Subscription
	cq  *nats.Subscription // connect events: the connection quota
	dis *nats.Subscription // disconnect events: deliveries to closed connections
	sts *nats.Subscription // answers other managers' stats requests

	mu       sync.Mutex // serialises changes made through this manager
	rts      map[string]*runtime
	accounts map[string]string // account public key -> tenant name
	counters map[string]*Stats
	keys     keyIndex
	closed   bool

	auditMu    sync.Mutex
	auditReady bool

	lease *leases
	stop  chan struct{} // ends the heartbeat
	beat  sync.WaitGroup
}

// runtime is what runs for one active tenant: a platform-operated user
// connection in the tenant's account, its JetStream context and
// reconciler, and the ingest.
type runtime struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	rec *catalog.Reconciler
	in  *ingest
	g   *gate
}

// NewManager builds a manager over nc (a PLATFORM admin connection).
func NewManager(nc *nats.Conn, trust *embeddednats.Trust, cfg Config) (*Manager, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	op, err := trust.OperatorSigningKey()
	if err != nil {
		return nil, fmt.Errorf("tenancy: operator signing key: %w", err)
	}
	s, err := newSealer(trust.OperatorSigningSeed)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return &Manager{cfg: cfg, log: cfg.Logger, trust: trust, opSigner: op, seal: s, nc: nc, js: js,
		rts: map[string]*runtime{}, accounts: map[string]string{}, counters: map[string]*Stats{},
		lease: newLeases(cfg.LeaseTTL, cfg.LeaseInterval), stop: make(chan struct{})}, nil
}

// Start opens the registry and the audit stream, pushes every tenant's
// account JWT again (a node that missed an update is brought up to date),
// and starts the ingest of every active tenant.
func (m *Manager) Start(ctx context.Context) error {
	var err error
	m.sys, err = embeddednats.ConnectSystem(m.trust, m.cfg.URL, nats.Name("platform-tenancy"), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
	if err != nil {
		return fmt.Errorf("tenancy: system connection: %w", err)
	}
	// The cluster may still be electing leaders (several daemons starting
	// at once): retry each JetStream call with a bounded attempt.
	m.reg = &registry{js: m.js, replicas: m.cfg.Replicas}
	var ts []*Tenant
	if err := tryUntil(ctx, func(actx context.Context) (err error) {
		ts, err = m.reg.list(actx)
		return err
	}); err != nil {
		return err
	}
	if m.den, err = m.watchDenials(); err != nil {
		return fmt.Errorf("tenancy: watch auth errors: %w", err)
	}
	if m.sts, err = m.serveStats(); err != nil {
		return fmt.Errorf("tenancy: serve stats: %w", err)
	}
	if m.cq, err = m.watchConnects(); err != nil {
		return fmt.Errorf("tenancy: watch connects: %w", err)
	}
	if m.dis, err = m.watchDisconnects(); err != nil {
		return fmt.Errorf("tenancy: watch disconnects: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, t := range ts {
		m.accounts[t.Account] = t.Name
		m.index(t)
		tok, err := m.accountJWT(t)
		if err != nil {
			return err
		}
		if err := m.push(ctx, tok); err != nil {
			return fmt.Errorf("tenancy: tenant %s: %w", t.Name, err)
		}
		if t.State == StateActive {
			if err := m.startRuntime(ctx, t); err != nil {
				return err
			}
		}
	}
	m.beat.Add(1)
	go func() {
		defer m.beat.Done()
		m.heartbeat(m.stop)
	}()
	return nil
}

// Close stops every tenant's ingest and closes the connections. It is
// idempotent.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	close(m.stop)
	m.mu.Unlock()
	m.beat.Wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	for name := range m.rts {
		m.stopRuntime(name)
	}
	for _, sub := range []*nats.Subscription{m.den, m.sts, m.dis, m.cq} {
		if sub != nil {
			_ = sub.Unsubscribe()
		}
	}
	if m.sys != nil {
		m.sys.Close()
	}
	return nil
}

func (m *Manager) stats(tenant string) *Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.statsLocked(tenant)
}

func (m *Manager) statsLocked(tenant string) *Stats {
	s := m.counters[tenant]
	if s == nil {
		s = &Stats{}
		m.counters[tenant] = s
	}
	return s
}

func (m *Manager) tenantOfAccount(acc string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.accounts[acc]
}

// startRuntime connects a platform user to t's account (unrestricted, not
// listed among t's users), waits for JetStream there, and starts the
// ingest for t's topics and queues. Callers hold m.mu.
func (m *Manager) startRuntime(ctx context.Context, t *Tenant) error {
	if m.rts[t.Name] != nil {
		return nil
	}
	token, seed, _, err := m.userJWT(t, "platform", jwt.Permissions{})
	if err != nil {
		return err
	}
	nc, err := embeddednats.Connect(m.trust, m.cfg.URL, nats.UserJWTAndSeed(token, string(seed)), nats.Name("platform-tenant-"+t.Name),
		nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
	if err != nil {
		return fmt.Errorf("tenancy: connect to tenant %s: %w", t.Name, err)
	}
	js, err := jetstream.NewWithAPIPrefix(nc, APIPrefix)
	if err != nil {
		nc.Close()
		return err
	}
	// JetStream is enabled for a new account once its JWT is loaded;
	// wait for it so the first topic create does not race it.
	deadline := time.Now().Add(15 * time.Second)
	for {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = js.AccountInfo(actx)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			nc.Close()
			return fmt.Errorf("tenancy: tenant %s: JetStream not available in its account: %w", t.Name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The ingest's events travel on their own connection, to the same
	// server first (see ingest).
	urls := []string{nc.ConnectedUrl()}
	for _, u := range wire.SplitURLs(m.cfg.URL) {
		if u != urls[0] {
			urls = append(urls, u)
		}
	}
	fwd, err := wire.Dial(wire.Options{URLs: urls, JWT: token, Seed: seed, Name: "platform-ingest-" + t.Name, Logger: m.log, TLS: m.trust.ClientTLS})
	if err != nil {
		nc.Close()
		return fmt.Errorf("tenancy: connect the ingest of tenant %s: %w", t.Name, err)
	}
	rt := &runtime{nc: nc, js: js,
		rec: catalog.NewReconciler(js, catalog.ReconcilerOptions{DefaultReplicas: m.cfg.Replicas, Logger: m.log})}
	name := t.Name
	rt.in = newIngest(t.Name, nc, fwd, t.Quota, m.statsLocked(t.Name), func(detail string) {
		m.auditAsync(Record{Actor: "platform-ingest", Action: ActionQuotaHit, Tenant: name, Detail: detail})
	})
	// The gate runs on every daemon, leader of the ingest or not: every
	// pull, ack and direct get in the account passes it.
	gateOpts := wire.Options{JWT: token, Seed: seed, Name: "platform-gate-" + t.Name, Logger: m.log, TLS: m.trust.ClientTLS}
	dial := func(url string) (*wire.Conn, error) {
		o := gateOpts
		o.URLs = []string{url} // a node's gate stays on its node
		return wire.Dial(o)
	}
	if rt.g, err = startGate(ctx, t.Name, t.Account, fwd, m.cfg.Local, dial, func(detail string) {
		m.auditAsync(Record{Actor: "platform-gate", Action: ActionGateRefused, Tenant: name, Detail: detail})
	}); err != nil {
		rt.in.close()
		nc.Close()
		return fmt.Errorf("tenancy: start the JetStream gate of tenant %s: %w", t.Name, err)
	}
	if _, err := m.watchAPIAudit(t.Name, nc, rt.in.isActive); err != nil {
		rt.close()
		return fmt.Errorf("tenancy: watch the JetStream API of tenant %s: %w", t.Name, err)
	}
	for topic := range t.Topics {
		_ = rt.in.subscribe(topic + ".*")
	}
	for q := range t.Queues {
		_ = rt.in.subscribe(q + ".>")
	}
	m.rts[t.Name] = rt
	// Take the tenant's ingest lease now if nobody holds it (one daemon,
	// or the first to start): publishes are taken at once. Otherwise this
	// manager stands by and the heartbeat takes over when the holder
	// stops renewing.
	m.elect(ctx, t.Name, rt)
	return nil
}

// IngestCounts are the events this manager's ingest of tenant received
// and sent (forwards and refusals) since it started; ok is false if the
// tenant has no runtime here.
func (m *Manager) IngestCounts(tenant string) (received, sent uint64, ok bool) {
	m.mu.Lock()
	rt := m.rts[tenant]
	m.mu.Unlock()
	if rt == nil {
		return 0, 0, false
	}
	received, sent = rt.in.counts()
	return received, sent, true
}

// IngestServer is the server this manager's ingest of tenant takes
// events on ("" if it has no runtime here or is reconnecting).
func (m *Manager) IngestServer(tenant string) string {
	m.mu.Lock()
	rt := m.rts[tenant]
	m.mu.Unlock()
	if rt == nil {
		return ""
	}
	return rt.in.fwd.ServerName()
}

// stopRuntime stops a tenant's ingest and releases its lease, so a
// standby takes over at its next heartbeat. Callers hold m.mu.
func (m *Manager) stopRuntime(name string) {
	if rt := m.rts[name]; rt != nil {
		_ = rt.in.setActive(false)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		m.release(ctx, name)
		cancel()
		rt.close()
		delete(m.rts, name)
	}
}

// Leading reports whether this manager's ingest takes tenant's publishes
// (it holds the tenant's lease).
func (m *Manager) Leading(tenant string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	rt := m.rts[tenant]
	return rt != nil && rt.in.isActive()
}

// conns is how many connections rt holds in its tenant's account: a
// pull gate whose node is down holds none.
func (rt *runtime) conns() int {
	n := RuntimeConns
	if rt.g != nil {
		for _, ng := range rt.g.nodes {
			if ng.conn.Connected() {
				n++
			}
		}
	}
	return n
}

func (rt *runtime) close() {
	if rt.g != nil {
		rt.g.close()
	}
	rt.in.close()
	rt.nc.Close()
}

// runtimeOf returns the runtime of an active tenant. Callers hold m.mu.
func (m *Manager) runtimeOf(t *Tenant) (*runtime, error) {
	if t.State != StateActive {
		return nil, fmt.Errorf("%w: tenant %s is %s; resume it first", ErrConflict, t.Name, t.State)
	}
	rt := m.rts[t.Name]
	if rt == nil {
		return nil, fmt.Errorf("tenancy: tenant %s is not running on this daemon", t.Name)
	}
	return rt, nil
}

// tryUntil calls fn with a 5 s attempt timeout until it succeeds or ctx
// ends (internal/retry, any error retried).
func tryUntil(ctx context.Context, fn func(ctx context.Context) error) error {
	return retry.Do(ctx, retry.Policy{Initial: 250 * time.Millisecond, Max: 2 * time.Second, Retryable: func(error) bool { return true }},
		func(ctx context.Context) error {
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			return fn(actx)
		})
}

func (m *Manager) check() error {
	if m.closed {
		return ErrClosed
	}
	if m.reg == nil {
		return errors.New("tenancy: manager not started")
	}
	return nil
}
