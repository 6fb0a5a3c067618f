package daemon

import (
	"context"
	"errors"

	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/principal"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/redrive"
)

// resetReviewEndpoints serve review-gated group resets (redrive/reset.go)
// on the platform admin account's redrive service: request, approve (by
// another principal), execute (once; the reconciler moves the group), show
// and list. Request, approve and execute are the four-eyes path: each
// needs a signed request (internal/principal; platformctl --user-creds)
// whose principal is recorded, and an approval needs an authenticated
// requester other than the approver. A tenant's user cannot act here
// (the platform admin account's groups). A direct reset (run) may be
// unsigned: it is recorded as unauthenticated:<name>.
func (d *Daemon) resetReviewEndpoints(v *principal.Verifier) []control.Endpoint {
	if d.redrive == nil {
		return nil
	}
	s := d.redrive
	return []control.Endpoint{
		signedRep(v, "group_reset_request", redrive.SubjResetRequest, func(ctx context.Context, c caller, r redrive.ResetRequestBody) (redrive.ResetRequest, error) {
			if err := authorize(c, "a group reset request"); err != nil {
				return redrive.ResetRequest{}, err
			}
			return s.RequestResetAs(ctx, r.Reset, c.name(r.By), r.Reason, true)
		}),
		signedRep(v, "group_reset_approve", redrive.SubjResetApprove, func(ctx context.Context, c caller, r redrive.ResetDecision) (redrive.ResetRequest, error) {
			if err := authorize(c, "approving a group reset"); err != nil {
				return redrive.ResetRequest{}, err
			}
			cur, err := s.GetReset(ctx, r.ID)
			if err != nil {
				return redrive.ResetRequest{}, err
			}
			if !cur.Authenticated {
				return redrive.ResetRequest{}, refused{errors.New("redrive: reset request " + r.ID + " was made by " + cur.Requester +
					" without an authenticated principal, so four eyes cannot be checked: file a new request with --user-creds; nothing was done")}
			}
			return s.ApproveReset(ctx, r.ID, c.name(r.By), r.Reason)
		}),
		signedRep(v, "group_reset_execute", redrive.SubjResetExecute, func(ctx context.Context, c caller, r redrive.ResetDecision) (catalog.GroupReset, error) {
			if err := authorize(c, "executing a group reset"); err != nil {
				return catalog.GroupReset{}, err
			}
			return s.ExecuteReset(ctx, r.ID, c.name(r.By), d.rec.ResetGroupApproved)
		}),
		signedRep(v, "group_reset_run", redrive.SubjResetRun, func(ctx context.Context, c caller, r redrive.ResetRequestBody) (catalog.GroupReset, error) {
			if err := c.mayAct(""); err != nil {
				return catalog.GroupReset{}, err
			}
			out, err := s.RunReset(ctx, r.Reset, c.name(r.By), r.Reason, d.rec.ResetGroup)
			if errors.Is(err, catalog.ErrApprovalRequired) {
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

// authorize is the check of the review path of group resets: an
// authenticated principal of the platform admin account.
func authorize(c caller, what string) error {
	if err := c.needAuth(what); err != nil {
		return err
	}
	return c.mayAct("")
}
