package daemon

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgplatform/platform/conf"
	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/internal/console"
	"github.com/msgplatform/platform/internal/metrics"
	"github.com/msgplatform/platform/internal/tlsconf"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/canary"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/platform/dlq"
	"github.com/msgplatform/platform/platform/region"
	"github.com/msgplatform/platform/redrive"
	"github.com/msgplatform/platform/tenancy"
)

// Daemon is a running platformd.
type Daemon struct {
	cfg *conf.Config
	log *slog.Logger

	trust  *embeddednats.Trust
	nodes  []*embeddednats.Node
	fabric *embeddednats.Fabric // nil in node mode
	region embeddednats.Region
	// regions is set in mode regions (regions.go).
	regions *regionsState
	// nodeGuard is the residency guard of a mode-node daemon linked to
	// other regions (regions.go, startNodeGuard).
	nodeGuard *region.Guard
	// peers is set in mode node with regions.peers (regions_peers.go).
	peers *peersState

	nc      *nats.Conn
	js      jetstream.JetStream
	rec     *catalog.Reconciler
	svc     micro.Service
	tenants *tenancy.Manager
	canary  *canary.Monitor
	redrive *redrive.Service
	// dlqRouters dead-letters for every topic and queue (groups.go).
	dlqRouters *dlq.Routers
	// redrives are the tenants' redrive services (redrive.go).
	redrives *redriveScopes

	// tenantCanaries are the canaries of tenants' accounts (canary.go).
	tenantCanaries *tenantCanaries
	// console is the web console (console.go); nil when not mounted.
	console *console.Console

	reg      *prometheus.Registry
	own      *ownMetrics
	httpSrv  *http.Server
	httpAddr net.Addr

	mu         sync.Mutex
	reconciled bool
	closed     bool

	// opKV is the operator registry once opened with leader reads
	// (operatorBucket).
	opKV atomic.Pointer[jetstream.KeyValue]
}

// New validates cfg and builds a daemon; nothing is started.
func New(cfg *conf.Config, log *slog.Logger) (*Daemon, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	return &Daemon{cfg: cfg, log: log, reg: prometheus.NewRegistry()}, nil
}

// Start starts the nodes, writes the admin credentials, reconciles the
// catalog and starts the control API and the HTTP listener. It returns when
// the daemon is ready, or the first error (after undoing what it started).
func (d *Daemon) Start(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = d.Close(cctx)
		}
	}()
	// A dev fabric creates its trust on first start. A node of a
	// multi-host cluster refuses to: a node that minted its own operator
	// could never join the others (they must share trust.json, made once
	// with `platformd init`).
	trustDir := filepath.Join(d.cfg.DataDir, "trust")
	if d.cfg.Mode == conf.ModeFabric || d.cfg.Mode == conf.ModeRegions {
		d.trust, err = embeddednats.LoadOrCreateTrust(trustDir)
	} else {
		d.trust, err = embeddednats.LoadTrust(trustDir)
		if errors.Is(err, embeddednats.ErrNoTrust) {
			err = fmt.Errorf("%w: run `platformd init --data-dir DIR` once and copy DIR/trust/trust.json to %s on every node", err, trustDir)
		}
	}
	if err != nil {
		return err
	}
	// Every connection the daemon makes to its nodes dials with the TLS
	// of their client ports.
	if d.trust.ClientTLS, err = d.ownTLS(); err != nil {
		return err
	}
	credsPath, err := d.trust.WriteCreds(filepath.Join(d.cfg.DataDir, "creds"))
	if err != nil {
		return err
	}
	if err := d.startNodes(ctx); err != nil {
		return fmt.Errorf("daemon: start nodes: %w", err)
	}
	d.log.Info("platformd: nodes ready", "region", d.region.Name, "nodes", len(d.nodes), "client_url", d.nodes[0].ClientURL(), "creds", credsPath)

	urls := make([]string, len(d.nodes))
	for i, n := range d.nodes {
		urls[i] = n.ClientURL()
	}
	d.nc, err = embeddednats.ConnectAdmin(d.trust, strings.Join(urls, ","),
		nats.Name("platformd"), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
	if err != nil {
		return fmt.Errorf("daemon: connect to local node: %w", err)
	}
	if d.js, err = jetstream.New(d.nc); err != nil {
		return err
	}
	d.rec = catalog.NewReconciler(d.js, catalog.ReconcilerOptions{DefaultReplicas: d.cfg.Durability().Replicas, Logger: d.log})
	d.own = newOwnMetrics(d.reg)
	d.reg.MustRegister(metrics.NewNATSCollector(d.metricSource))
	d.registerCatalogMetrics()

	// The steps run in this order: on the listening side of a region
	// link, the dialling peers deny the catalog's resident objects before
	// reconcile creates them (regions.go).
	for _, step := range []struct {
		what string
		run  func(context.Context) error
	}{
		{"deny the catalog at peers", d.denyCatalogAtPeers},
		{"reconcile", d.reconcile},
		{"start the residency guard", d.startNodeGuard},
		{"start the DLQ routers", d.startDLQRouters},
		{"start tenancy", d.startTenancy},
		{"start the canary", d.startCanary},
		{"start redrive", d.startRedrive},
	} {
		if err := step.run(ctx); err != nil {
			return fmt.Errorf("daemon: %s: %w", step.what, err)
		}
	}
	if d.cfg.Control.Enabled {
		if d.svc, err = d.serveControl(); err != nil {
			return err
		}
		if err := d.waitControlReachable(ctx); err != nil {
			return fmt.Errorf("daemon: control API: %w", err)
		}
	}
	return d.startHTTP()
}

// ownTLS is the TLS the daemon's own connections dial its nodes' client
// ports with (nil: plaintext ports): node.tls in mode node, fabric.tls in
// mode fabric (tlsconf.Config.Internal: they present the node's
// certificate, which node.tls.verify asks for).
func (d *Daemon) ownTLS() (*tls.Config, error) {
	var c tlsconf.Config
	switch d.cfg.Mode {
	case conf.ModeNode:
		c = d.cfg.Node.TLS
	case conf.ModeFabric:
		c = d.cfg.Fabric.TLS
	}
	tc, err := c.Internal()
	if err != nil {
		return nil, fmt.Errorf("daemon: TLS of the platform's own connections: %w", err)
	}
	return tc, nil
}

func (d *Daemon) startNodes(ctx context.Context) error {
	if d.cfg.Mode == conf.ModeRegions {
		return d.startRegions(ctx)
	}
	if d.cfg.Mode == conf.ModeFabric {
		f, err := embeddednats.NewFabric(d.cfg.Fabric, d.trust)
		if err != nil {
			return err
		}
		d.fabric, d.nodes, d.region = f, f.Nodes(), f.Config().Region
		return f.Start(ctx)
	}
	// The link comes up with the deny list derived so far (regions_peers.go).
	nodeCfg := d.cfg.Node
	nodeCfg.Leaf = d.presetLinkDeny(nodeCfg.Leaf)
	n, err := embeddednats.NewNode(nodeCfg, d.trust)
	if err != nil {
		return err
	}
	d.nodes, d.region = []*embeddednats.Node{n}, n.Config().Region
	return n.Start(ctx)
}

// reconcile applies the declared catalog, retrying transient failures
// (e.g. while a peer is still joining) until ctx ends. A conflict or an
// invalid spec is returned at once: those need a person.
func (d *Daemon) reconcile(ctx context.Context) error {
	opts := catalog.ApplyOptions{AllowReducedReplicas: d.cfg.Reconcile.AllowReducedReplicas, AllowCleanupChange: d.cfg.Reconcile.AllowCleanupChange}
	backoff := 250 * time.Millisecond
	for {
		changes, err := d.rec.Apply(ctx, d.cfg.Catalog, opts)
		if err == nil {
			for _, c := range changes { // the reconciler logs each change
				d.own.reconciled.WithLabelValues(string(c.Kind), string(c.Action)).Inc()
			}
			d.mu.Lock()
			d.reconciled = true
			d.mu.Unlock()
			return nil
		}
		if errors.Is(err, platform.ErrConflict) || errors.Is(err, platform.ErrInvalidSpec) || errors.Is(err, platform.ErrNotFound) {
			return fmt.Errorf("daemon: reconcile declared catalog: %w", err)
		}
		d.log.Warn("platformd: reconcile failed, retrying", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return fmt.Errorf("daemon: reconcile declared catalog: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// Run starts the daemon and blocks until ctx ends, then drains it within
// drain.
func (d *Daemon) Run(ctx context.Context, drain time.Duration) error {
	if err := d.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	d.log.Info("platformd: draining", "deadline", drain)
	cctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	return d.Close(cctx)
}

// Close stops the HTTP listener and the control API, then drains the nodes
// within ctx. It is idempotent.
func (d *Daemon) Close(ctx context.Context) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	var errs []error
	if d.httpSrv != nil {
		errs = append(errs, d.httpSrv.Shutdown(ctx))
	}
	if d.svc != nil {
		errs = append(errs, d.svc.Stop())
	}
	if d.console != nil {
		errs = append(errs, d.console.Close(ctx))
	}
	errs = append(errs, d.stopRedrive(ctx))
	errs = append(errs, d.stopCanary(ctx))
	errs = append(errs, d.stopTenancy(ctx))
	errs = append(errs, d.stopDLQRouters(ctx))
	if d.nc != nil {
		d.nc.Close()
	}
	errs = append(errs, d.closeRegions(ctx))
	if d.fabric != nil {
		errs = append(errs, d.fabric.Close(ctx))
	} else if d.regions == nil {
		for _, n := range d.nodes {
			errs = append(errs, n.Close(ctx))
		}
	}
	return errors.Join(errs...)
}

// Nodes returns the local nodes.
func (d *Daemon) Nodes() []*embeddednats.Node { return d.nodes }

// Trust returns the installation's trust material.
func (d *Daemon) Trust() *embeddednats.Trust { return d.trust }

// HTTPAddr returns the address the HTTP listener is bound to (nil if off).
func (d *Daemon) HTTPAddr() net.Addr { return d.httpAddr }

// Ready returns nil when the daemon is ready to serve, otherwise why not.
func (d *Daemon) Ready() error {
	d.mu.Lock()
	reconciled, closed := d.reconciled, d.closed
	d.mu.Unlock()
	if closed {
		return errors.New("shutting down")
	}
	for _, n := range d.nodes {
		if n.Server() == nil {
			continue // a fabric keeps serving with a node down
		}
		if err := n.Ready(); err != nil {
			return fmt.Errorf("node %s: %w", n.Name(), err)
		}
	}
	if !reconciled {
		return errors.New("catalog not reconciled yet")
	}
	if d.cfg.Control.Enabled && (d.svc == nil || d.svc.Stopped()) {
		return errors.New("control API not serving")
	}
	return nil
}

func (d *Daemon) metricSource() []metrics.Server {
	out := make([]metrics.Server, 0, len(d.nodes))
	for _, n := range d.nodes {
		out = append(out, metrics.Server{Srv: n.Server(), Region: d.region.Name})
	}
	return out
}
