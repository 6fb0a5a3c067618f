package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/msgplatform/platform/internal/cli"
	"github.com/msgplatform/platform/outboxrelay"
	"github.com/msgplatform/platform/outboxrelay/pebbleoutbox"
	"github.com/msgplatform/platform/outboxrelay/pgoutbox"
)

// relay opens the store, connects, serves metrics and runs the relay until
// ctx ends.
func relay(ctx context.Context, o options, stderr io.Writer) error {
	log := slog.New(slog.NewTextHandler(stderr, nil))
	store, closeStore, err := openStore(ctx, o)
	if err != nil {
		return err
	}
	defer closeStore()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg := o.cfg
	cfg.Registerer, cfg.Logger = reg, log
	if os.Getenv(envPauseAfterPublish) == "1" {
		cfg.Faults.AfterPublish = func([]outboxrelay.Record) error {
			fmt.Fprintln(stderr, faultLine)
			select {} // until killed
		}
	}
	if o.creds != "" {
		if fi, err := os.Stat(o.creds); err != nil {
			return fmt.Errorf("--creds: %w", err)
		} else if fi.Mode().Perm()&0o077 != 0 {
			log.Warn("outboxrelay: creds file is readable by others; chmod 600 it", "path", o.creds, "mode", fi.Mode().Perm().String())
		}
	}
	nopts := []nats.Option{nats.Name("outboxrelay-" + cfg.Name), nats.MaxReconnects(-1),
		// Fail publishes at once while disconnected instead of buffering
		// them: the relay retries them itself.
		nats.ReconnectBufSize(-1), nats.Timeout(5 * time.Second)}
	if o.creds != "" {
		nopts = append(nopts, nats.UserCredentials(o.creds))
	}
	tc, err := o.tls.Client("")
	if err != nil {
		return cli.UsageError{Err: fmt.Errorf("--tls-ca, --tls-cert, --tls-key: %w", err)}
	}
	if tc != nil {
		nopts = append(nopts, nats.Secure(tc))
	}
	nc, err := connect(ctx, o.natsURL, nopts, log)
	if err != nil {
		return err
	}
	defer nc.Close()
	r, err := outboxrelay.New(cfg, store, nc)
	if err != nil {
		return err
	}
	if o.httpAddr != "" {
		stopHTTP, err := serveMetrics(o.httpAddr, reg, log)
		if err != nil {
			return err
		}
		defer stopHTTP()
	}
	log.Info("outboxrelay: running", "outbox", cfg.Name, "holder", cfg.Holder, "nats", o.natsURL)
	if err := r.Run(ctx); err != nil {
		return err
	}
	log.Info("outboxrelay: stopped")
	return nil
}

// openStore opens the PostgreSQL (migrated) or Pebble outbox.
func openStore(ctx context.Context, o options) (outboxrelay.Store, func(), error) {
	if o.dsn != "" {
		pool, err := pgxpool.New(ctx, o.dsn)
		if err != nil {
			return nil, nil, cli.UsageError{Err: fmt.Errorf("--dsn: %w", err)}
		}
		store, err := pgoutbox.Open(pool, pgoutbox.Options{Schema: o.schema})
		if err != nil {
			pool.Close()
			return nil, nil, cli.UsageError{Err: fmt.Errorf("--schema: %w", err)}
		}
		mctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := store.Migrate(mctx); err != nil {
			pool.Close()
			return nil, nil, fmt.Errorf("--dsn: %w", err)
		}
		return store, pool.Close, nil
	}
	db, err := pebble.Open(o.pebbleDir, &pebble.Options{ErrorIfNotExists: true})
	if err != nil {
		return nil, nil, fmt.Errorf("--pebble %s: %w", o.pebbleDir, err)
	}
	store, err := pebbleoutbox.Open(db, pebbleoutbox.Options{})
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("--pebble %s: %w", o.pebbleDir, err)
	}
	return store, func() { db.Close() }, nil
}

// connect dials the platform, retrying with backoff until ctx ends (the
// relay may start before the broker).
func connect(ctx context.Context, url string, opts []nats.Option, log *slog.Logger) (*nats.Conn, error) {
	backoff := 100 * time.Millisecond
	for {
		nc, err := nats.Connect(url, opts...)
		if err == nil {
			return nc, nil
		}
		if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) {
			return nil, fmt.Errorf("connect to %s: %w (check --creds)", url, err)
		}
		if hint := tlsRefusal(err); hint != "" {
			return nil, fmt.Errorf("connect to %s: %w (%s)", url, err, hint)
		}
		log.Warn("outboxrelay: platform unavailable, retrying", "nats", url, "err", err, "backoff", backoff)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("connect to %s: %w", url, err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// tlsRefusal says what to fix when err is a TLS refusal, which no retry
// cures: the platform's certificate fails the check, the platform wants
// TLS or a client certificate. It is "" for any other error.
func tlsRefusal(err error) string {
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var verify *tls.CertificateVerificationError
	var op *net.OpError
	switch {
	case errors.As(err, &unknown), errors.As(err, &host), errors.As(err, &verify):
		return "the platform's certificate is not signed by a CA trusted here for this host: pass its CA as --tls-ca and check the URL's host"
	case errors.Is(err, nats.ErrSecureConnRequired):
		return "the platform requires TLS: pass --tls-ca (or use a tls:// URL)"
	case errors.As(err, &op) && op.Op == "remote error": // a TLS alert from the platform
		return "the platform refused the TLS handshake: it may require a client certificate (--tls-cert, --tls-key) of its CA"
	}
	return ""
}

// serveMetrics serves reg on addr/metrics until the returned stop.
func serveMetrics(addr string, reg *prometheus.Registry, log *slog.Logger) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, cli.UsageError{Err: fmt.Errorf("--http %s: %w", addr, err)}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("outboxrelay: metrics server", "err", err)
		}
	}()
	log.Info("outboxrelay: metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
