package daemon

import (
	"context"

	"github.com/msgplatform/platform/platform"
)

// startCanary starts publishing canaries into the platform account's
// topics and queues (canary.interval; 0 turns it off) and registers
// platform_canary_age_seconds{topic,group}, computed from the broker's
// ack floors, on the daemon's registry.
func (d *Daemon) startCanary(ctx context.Context) error {
	if !d.cfg.Canary.Enabled() {
		d.log.Info("platformd: canary off (canary.interval is 0)")
		return nil
	}
	c, err := platform.NewCanary(d.js, d.cfg.Canary, d.log)
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	d.canary = c
	d.reg.MustRegister(c)
	return nil
}

func (d *Daemon) stopCanary(ctx context.Context) error {
	if d.canary == nil {
		return nil
	}
	return d.canary.Close(ctx)
}

// CanaryAges returns every group's canary age (nil when the canary is
// off or the daemon not started).
func (d *Daemon) CanaryAges() []platform.CanaryAge {
	if d.canary == nil {
		return nil
	}
	return d.canary.Ages()
}
