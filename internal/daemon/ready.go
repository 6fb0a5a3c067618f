package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/msgplatform/platform/embeddednats"
)

// waitControlReachable returns when a client of every local node gets an
// answer from the control service: its subscription interest has reached
// every node over the routes, so a platformctl connected anywhere is not
// told "no responders" right after start.
//
// The probe is a subscription made on the service's connection after all
// of the service's own: a node's route learns of a connection's
// subscriptions in the order the connection made them, so a node that
// routes the probe routes every endpoint. (Probing $SRV.PING proved less:
// the service subscribes its PING first and its endpoints after, so a node
// could route the PING and not yet the endpoint a platformctl calls.)
func (d *Daemon) waitControlReachable(ctx context.Context) error {
	probe := "_PLATFORM.control.ready." + nuid.Next()
	sub, err := d.nc.Subscribe(probe, func(m *nats.Msg) { _ = m.Respond(nil) })
	if err != nil {
		return fmt.Errorf("daemon: control API readiness probe: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	// Bounded on its own: platformd starts with a context that has no
	// deadline, and FlushWithContext refuses one without.
	if err := d.nc.FlushTimeout(15 * time.Second); err != nil {
		return fmt.Errorf("daemon: control API readiness probe: %w", err)
	}
	for _, n := range d.nodes {
		nc, err := embeddednats.ConnectAdmin(d.trust, n.ClientURL(), nats.Name("platformd-ready"))
		if err != nil {
			return fmt.Errorf("daemon: connect to %s: %w", n.Name(), err)
		}
		err = pingUntil(ctx, nc, probe)
		nc.Close()
		if err != nil {
			return fmt.Errorf("daemon: control API not reachable from %s: %w", n.Name(), err)
		}
	}
	return nil
}

func pingUntil(ctx context.Context, nc *nats.Conn, subject string) error {
	for {
		rctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err := nc.RequestWithContext(rctx, subject, nil)
		cancel()
		if err == nil {
			return nil
		}
		if !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
