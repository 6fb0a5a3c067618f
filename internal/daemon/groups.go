package daemon

import (
	"context"
	"errors"

	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/platform"
)

// groupEndpoints are the control API's group operations beyond apply.
func (d *Daemon) groupEndpoints() []control.Endpoint {
	return []control.Endpoint{
		{Name: "group_reset", Subject: control.SubjGroupReset, Handle: control.JSON(func(ctx context.Context, r control.GroupResetRequest) (platform.GroupReset, error) {
			out, err := d.rec.ResetGroup(ctx, r)
			if errors.Is(err, platform.ErrApprovalRequired) {
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
