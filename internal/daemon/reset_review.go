package daemon

import (
	"context"
	"errors"

	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/redrive"
)

// resetReviewEndpoints serve review-gated group resets (redrive/reset.go)
// on the platform admin account's redrive service: request, approve (by
// another principal), execute (once; the reconciler moves the group), show
// and list.
func (d *Daemon) resetReviewEndpoints() []control.Endpoint {
	if d.redrive == nil {
		return nil
	}
	s := d.redrive
	return []control.Endpoint{
		rep("group_reset_request", redrive.SubjResetRequest, func(ctx context.Context, r redrive.ResetRequestBody) (redrive.ResetRequest, error) {
			return s.RequestReset(ctx, r.Reset, r.By, r.Reason)
		}),
		rep("group_reset_approve", redrive.SubjResetApprove, func(ctx context.Context, r redrive.ResetDecision) (redrive.ResetRequest, error) {
			return s.ApproveReset(ctx, r.ID, r.By, r.Reason)
		}),
		rep("group_reset_execute", redrive.SubjResetExecute, func(ctx context.Context, r redrive.ResetDecision) (platform.GroupReset, error) {
			return s.ExecuteReset(ctx, r.ID, r.By, d.rec.ResetGroupApproved)
		}),
		rep("group_reset_run", redrive.SubjResetRun, func(ctx context.Context, r redrive.ResetRequestBody) (platform.GroupReset, error) {
			out, err := s.RunReset(ctx, r.Reset, r.By, r.Reason, d.rec.ResetGroup)
			if errors.Is(err, platform.ErrApprovalRequired) {
				err = refused{err}
			}
			return out, err
		}),
		rep("group_reset_show", redrive.SubjResetShow, func(ctx context.Context, r redrive.ResetDecision) (redrive.ResetRequest, error) {
			return s.GetReset(ctx, r.ID)
		}),
		rep("group_reset_list", redrive.SubjResetList, func(ctx context.Context, _ struct{}) ([]redrive.ResetRequest, error) {
			return s.ListResets(ctx)
		}),
	}
}
