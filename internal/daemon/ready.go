package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/internal/control"
)

// waitControlReachable returns when a client of every local node gets an
// answer from the control service: its subscription interest has reached
// every node over the routes, so a platformctl connected anywhere is not
// told "no responders" right after start.
func (d *Daemon) waitControlReachable(ctx context.Context) error {
	for _, n := range d.nodes {
		nc, err := embeddednats.ConnectAdmin(d.trust, n.ClientURL(), nats.Name("platformd-ready"))
		if err != nil {
			return fmt.Errorf("daemon: connect to %s: %w", n.Name(), err)
		}
		err = pingUntil(ctx, nc, "$SRV.PING."+control.ServiceName)
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
