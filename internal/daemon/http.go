package daemon

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ownMetrics are the platform's own figures (the nats-server ones come
// from metrics.NATSCollector).
type ownMetrics struct {
	reconciled *prometheus.CounterVec
	control    *prometheus.CounterVec
}

func newOwnMetrics(reg *prometheus.Registry) *ownMetrics {
	m := &ownMetrics{
		reconciled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "platform_reconcile_changes_total",
			Help: "Objects reconciled, by kind and action (create, update, unchanged).",
		}, []string{"kind", "action"}),
		control: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "platform_control_requests_total",
			Help: "Control API requests, by endpoint and outcome (ok or the error code).",
		}, []string{"endpoint", "outcome"}),
	}
	reg.MustRegister(m.reconciled, m.control,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (d *Daemon) startHTTP() error {
	if !d.cfg.HTTP.Enabled() {
		return nil
	}
	listen := d.cfg.HTTP.Listen
	d.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "platform_ready",
		Help: "1 when platformd is ready (nodes ready, meta leader, catalog reconciled, control API up).",
	}, func() float64 {
		if d.Ready() == nil {
			return 1
		}
		return 0
	}))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		for _, n := range d.nodes {
			if n.Server() != nil {
				fmt.Fprintln(w, "ok")
				return
			}
		}
		http.Error(w, "no local node is running", http.StatusServiceUnavailable)
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := d.Ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	if err := d.mountConsole(mux); err != nil {
		return err
	}
	tc, err := d.cfg.HTTP.TLS.Server()
	if err != nil {
		return fmt.Errorf("daemon: http.tls: %w", err)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("daemon: http listen %s: %w", listen, err)
	}
	if tc != nil {
		ln = tls.NewListener(ln, tc)
	}
	d.httpAddr = ln.Addr()
	// Bounded: a client that trickles its headers or body, never reads
	// the response, or idles a keep-alive connection is cut off.
	d.httpSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 60 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	go func() {
		if err := d.httpSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Error("platformd: http server stopped", "err", err)
		}
	}()
	d.log.Info("platformd: http listening", "addr", d.httpAddr.String(), "tls", tc != nil)
	return nil
}
