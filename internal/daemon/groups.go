package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/platform/dlq"
)

// groupEndpoints are the control API's group operations beyond apply.
func (d *Daemon) groupEndpoints() []control.Endpoint {
	return []control.Endpoint{
		// group.reset answers dry runs only: a reset that moves a group
		// goes through group.reset.run (or request → approve → execute),
		// which needs a reason and appends it to the audit stream.
		{Name: "group_reset", Subject: control.SubjGroupReset, Handle: control.JSON(func(ctx context.Context, r control.GroupResetRequest) (catalog.GroupReset, error) {
			if !r.DryRun {
				return catalog.GroupReset{}, fmt.Errorf("%w: group.reset answers dry runs only; a reset that moves group %q is audited: use group.reset.run with a reason (platformctl group reset --reason WHY)", control.ErrInvalid, r.Group)
			}
			out, err := d.rec.ResetGroup(ctx, r)
			if errors.Is(err, catalog.ErrApprovalRequired) {
				err = refused{err}
			}
			return out, err
		})},
	}
}

// refused classifies a refusal as a conflict (409) and keeps its message.
type refused struct{ err error }

func (e refused) Error() string        { return e.err.Error() }
func (e refused) Unwrap() error        { return e.err }
func (e refused) Is(target error) bool { return target == control.ErrConflict }

// dlqRouterRefresh is how often the daemon looks for topics and queues
// applied after it started (control API apply) to route their DLQs too.
const dlqRouterRefresh = 5 * time.Second

// startDLQRouters runs the DLQ router of every topic and queue of the
// platform account, so an event whose consumer died on its last attempt,
// or that a client terminated without copying it, reaches its DLQ with a
// complete entry even when no Member or Worker of that object runs a
// router of its own.
//
// A router that cannot bind yet (JetStream without a meta leader while
// peers restart) is not fatal: the routers retry every dlqRouterRefresh,
// and the DLQ events stream keeps what arrives meanwhile.
func (d *Daemon) startDLQRouters(ctx context.Context) error {
	d.dlqRouters = dlq.NewRouters(d.js, dlqRouterRefresh, d.log)
	if err := d.dlqRouters.Start(ctx); err != nil {
		d.log.Warn("platformd: DLQ routers not all bound yet; retrying every "+dlqRouterRefresh.String(), "err", err)
	}
	return nil
}

func (d *Daemon) stopDLQRouters(ctx context.Context) error {
	if d.dlqRouters == nil {
		return nil
	}
	return d.dlqRouters.Close(ctx)
}

// DLQRouters returns the daemon's DLQ routers (nil before Start).
func (d *Daemon) DLQRouters() *dlq.Routers { return d.dlqRouters }
