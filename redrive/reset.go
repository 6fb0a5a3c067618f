package redrive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
)

// Review-gated group resets (replay): the redrive approval mechanism
// reused for `platformctl group reset` on a topic marked review: required.
//
// Guarantees:
//
//   - A reset request is stored under reset.<id> in the redrive bucket
//     (replicated KV), frozen when made: the group, topic, target and
//     rate inputs are what the approver sees and what runs.
//   - Four eyes: ApproveReset refuses the requester (ErrForbidden), on
//     every topic.
//   - Once: ExecuteReset moves the request from approved to executing by
//     compare-and-set on its revision before touching any consumer, so of
//     two executions exactly one resets the group and the other gets
//     ErrConflict; the approval is consumed even when the reset fails.
//   - Every transition is appended to the platform-audit stream with who
//     and why; an execution's record carries each partition's position
//     before (current_seq) and after (new_seq) the move.
//
// The principal ("by") is the caller's, as platformd established it:
// request, approve and execute through the control API need a request
// signed with the user's .creds (internal/principal), so four eyes
// compares two authenticated users; a direct reset may be unsigned and
// is then recorded as unauthenticated:<name> (see doc.go).

// Reset request states.
const (
	ResetRequested = "requested"
	ResetApproved  = "approved"
	ResetExecuting = "executing"
	ResetExecuted  = "executed"
	ResetFailed    = "failed"
)

// ResetRequest is a group reset waiting for, or past, its approval.
type ResetRequest struct {
	ID string `json:"id"`
	// Reset is the move that runs once approved (never a dry run).
	Reset     catalog.GroupResetRequest `json:"reset"`
	State     string                    `json:"state"`
	Requester string                    `json:"requester"`
	// Authenticated says Requester was authenticated (set by the server).
	Authenticated bool                `json:"authenticated,omitempty"`
	Reason        string              `json:"reason"`
	Approver      string              `json:"approver,omitempty"`
	ApproveReason string              `json:"approve_reason,omitempty"`
	Executor      string              `json:"executor,omitempty"`
	Created       time.Time           `json:"created"`
	Approved      time.Time           `json:"approved,omitzero"`
	Executed      time.Time           `json:"executed,omitzero"`
	Result        *catalog.GroupReset `json:"result,omitempty"`
	Error         string              `json:"error,omitempty"`
}

// Resetter moves a group whose approval has been consumed:
// catalog.Reconciler.ResetGroupApproved.
type Resetter func(ctx context.Context, req catalog.GroupResetRequest) (catalog.GroupReset, error)

// ResetPosition is one partition's move, as recorded in the audit log.
type ResetPosition struct {
	Partition int    `json:"partition"`
	Seq       uint64 `json:"seq"`
}

func resetKey(id string) string { return "reset." + id }

// RequestReset stores a request to reset req.Group as given (its DryRun
// and ApprovalID are ignored) by principal by, for reason. Both are
// required.
func (s *Service) RequestReset(ctx context.Context, req catalog.GroupResetRequest, by, reason string) (ResetRequest, error) {
	return s.RequestResetAs(ctx, req, by, reason, false)
}

// RequestResetAs is RequestReset recording whether by is an
// authenticated principal (platformd: from a signed request).
func (s *Service) RequestResetAs(ctx context.Context, req catalog.GroupResetRequest, by, reason string, authenticated bool) (ResetRequest, error) {
	req.DryRun, req.ApprovalID = false, ""
	var problems []string
	if err := req.Validate(); err != nil {
		problems = append(problems, err.Error())
	}
	if strings.TrimSpace(by) == "" {
		problems = append(problems, "by: the requesting principal is required")
	}
	if strings.TrimSpace(reason) == "" {
		problems = append(problems, "reason: say why the group is moved (--reason)")
	}
	if len(problems) > 0 {
		return ResetRequest{}, fmt.Errorf("%w: group reset request: %s", ErrInvalid, strings.Join(problems, "; "))
	}
	if err := checkReplayResidency(ctx, s.js, req); err != nil {
		return ResetRequest{}, err
	}
	r := ResetRequest{ID: newID(), Reset: req, State: ResetRequested, Requester: by, Authenticated: authenticated, Reason: reason, Created: time.Now().UTC()}
	b, err := json.Marshal(r)
	if err != nil {
		return ResetRequest{}, err
	}
	if _, err := s.kv.Create(ctx, resetKey(r.ID), b); err != nil {
		return ResetRequest{}, fmt.Errorf("redrive: store reset request: %w", err)
	}
	s.auditf(ctx, AuditRecord{Time: r.Created, Actor: by, Action: "group_reset.request", Target: r.ID, After: r,
		Detail: fmt.Sprintf("reset group %s (topic %q) to %s: %s", req.Group, req.Topic, resetTarget(req), reason)})
	return r, nil
}

// ApproveReset approves request id as principal by, who must not be its
// requester (ErrForbidden). Only a requested reset can be approved
// (ErrConflict otherwise).
func (s *Service) ApproveReset(ctx context.Context, id, by, reason string) (ResetRequest, error) {
	if strings.TrimSpace(by) == "" {
		return ResetRequest{}, fmt.Errorf("%w: approve reset %s: the approving principal is required", ErrInvalid, id)
	}
	r, err := s.updateReset(ctx, id, func(r *ResetRequest) error {
		if r.State != ResetRequested {
			return fmt.Errorf("%w: reset request %s is %s, only a requested reset can be approved", ErrConflict, id, r.State)
		}
		if r.Requester == by {
			return fmt.Errorf("%w: %s requested reset %s and cannot approve it: another person must", ErrForbidden, by, id)
		}
		r.State, r.Approver, r.ApproveReason, r.Approved = ResetApproved, by, reason, time.Now().UTC()
		return nil
	})
	if err != nil {
		return ResetRequest{}, err
	}
	s.auditf(ctx, AuditRecord{Time: r.Approved, Actor: by, Action: "group_reset.approve", Target: id,
		Detail: fmt.Sprintf("approved reset of group %s requested by %s: %s", r.Reset.Group, r.Requester, reason)})
	return *r, nil
}

// ExecuteReset consumes the approval of request id and runs the reset
// with reset, as principal by. It returns ErrConflict when the request is
// not approved (never approved, or already executed: an approval is used
// once). The result, or the failure, is stored on the request and
// appended to the audit log with each partition's position before and
// after.
func (s *Service) ExecuteReset(ctx context.Context, id, by string, reset Resetter) (catalog.GroupReset, error) {
	if strings.TrimSpace(by) == "" {
		return catalog.GroupReset{}, fmt.Errorf("%w: execute reset %s: the executing principal is required", ErrInvalid, id)
	}
	r, err := s.updateReset(ctx, id, func(r *ResetRequest) error {
		if r.State != ResetApproved {
			return fmt.Errorf("%w: reset request %s is %s: only an approved request runs, once", ErrConflict, id, r.State)
		}
		r.State, r.Executor = ResetExecuting, by
		return nil
	})
	if err != nil {
		return catalog.GroupReset{}, err
	}
	req := r.Reset
	req.ApprovalID = id
	out, rerr := reset(ctx, req)
	final, err := s.updateReset(context.WithoutCancel(ctx), id, func(r *ResetRequest) error {
		r.Executed = time.Now().UTC()
		if rerr != nil {
			r.State, r.Error = ResetFailed, rerr.Error()
			return nil
		}
		r.State, r.Result = ResetExecuted, &out
		return nil
	})
	if err != nil {
		s.log.Error("redrive: record reset outcome", "request", id, "err", err)
		final = r
	}
	before, after := resetPositions(out)
	rec := AuditRecord{Time: time.Now().UTC(), Actor: by, Action: "group_reset.execute", Target: id, Before: before, After: after,
		Detail: fmt.Sprintf("reset group %s on %s to %s (requested by %s: %s; approved by %s); %d events to process",
			out.Group, out.Topic, out.Target, final.Requester, final.Reason, final.Approver, out.ToProcess)}
	if rerr != nil {
		rec.Action = "group_reset.failed"
		rec.Detail = fmt.Sprintf("reset group %s failed: %v (approval %s consumed; partitions already moved stay moved)", r.Reset.Group, rerr, id)
	}
	s.auditf(ctx, rec)
	if rerr != nil {
		return out, fmt.Errorf("redrive: execute reset %s: %w", id, rerr)
	}
	return out, nil
}

// RunReset runs req directly with reset (catalog.Reconciler.ResetGroup,
// which refuses a topic marked review: required) as principal by, for
// reason, and appends the reset to the audit log with each partition's
// position before and after. A dry run changes nothing and is not
// audited; a real one needs by and reason. A reset that failed after
// moving some partitions is audited as group_reset.failed.
func (s *Service) RunReset(ctx context.Context, req catalog.GroupResetRequest, by, reason string, reset Resetter) (catalog.GroupReset, error) {
	req.ApprovalID = ""
	if req.DryRun {
		return reset(ctx, req)
	}
	if strings.TrimSpace(by) == "" || strings.TrimSpace(reason) == "" {
		return catalog.GroupReset{}, fmt.Errorf("%w: group reset: who (by) and why (reason, --reason) are required; they go to the audit log", ErrInvalid)
	}
	if err := checkReplayResidency(ctx, s.js, req); err != nil {
		return catalog.GroupReset{}, err
	}
	out, err := reset(ctx, req)
	if err != nil && (errors.Is(err, catalog.ErrApprovalRequired) || errors.Is(err, platform.ErrInvalidSpec) || errors.Is(err, platform.ErrNotFound) || len(out.Partitions) == 0) {
		return out, err // refused: nothing moved
	}
	before, after := resetPositions(out)
	rec := AuditRecord{Time: time.Now().UTC(), Actor: by, Action: "group_reset.direct", Target: req.Group, Before: before, After: after,
		Detail: fmt.Sprintf("reset group %s on %s to %s: %s; %d events to process", out.Group, out.Topic, out.Target, reason, out.ToProcess)}
	if err != nil {
		rec.Action = "group_reset.failed"
		rec.Detail = fmt.Sprintf("reset group %s on %s to %s failed: %v (partitions already moved stay moved): %s", req.Group, out.Topic, out.Target, err, reason)
	}
	s.auditf(ctx, rec)
	return out, err
}

// resetPositions are the per-partition positions before (next sequence
// to process) and after a reset.
func resetPositions(out catalog.GroupReset) (before, after []ResetPosition) {
	for _, p := range out.Partitions {
		before = append(before, ResetPosition{Partition: p.Partition, Seq: p.CurrentSeq})
		after = append(after, ResetPosition{Partition: p.Partition, Seq: p.NewSeq})
	}
	return before, after
}

func resetTarget(q catalog.GroupResetRequest) string {
	switch {
	case q.ToStart:
		return "start"
	case q.ToEnd:
		return "end"
	case q.ToTime != nil:
		return q.ToTime.UTC().Format(time.RFC3339Nano)
	}
	return "?"
}

// GetReset returns reset request id.
func (s *Service) GetReset(ctx context.Context, id string) (ResetRequest, error) {
	r, _, err := s.getReset(ctx, id)
	if err != nil {
		return ResetRequest{}, err
	}
	return *r, nil
}

// ListResets returns every reset request, newest first.
func (s *Service) ListResets(ctx context.Context) ([]ResetRequest, error) {
	out, err := loadStored(ctx, s, "reset", func(id string) (ResetRequest, bool, error) {
		r, _, err := s.getReset(ctx, id)
		if err != nil {
			return ResetRequest{}, false, err
		}
		return *r, true, nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.After(out[j].Created) })
	return out, nil
}

func (s *Service) getReset(ctx context.Context, id string) (*ResetRequest, jetstream.KeyValueEntry, error) {
	return readRecord[ResetRequest](ctx, s.kv.Get, "reset request", id, resetKey)
}

// updateReset applies fn by compare-and-set on the record's revision,
// re-reading and re-applying it when someone else wrote first, so two
// callers racing for one transition cannot both make it.
func (s *Service) updateReset(ctx context.Context, id string, fn func(r *ResetRequest) error) (*ResetRequest, error) {
	for attempt := 0; ; attempt++ {
		r, e, err := s.getReset(ctx, id)
		if err != nil {
			return nil, err
		}
		if err := fn(r); err != nil {
			return r, err
		}
		b, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		if _, err := s.kv.Update(ctx, resetKey(id), b, e.Revision()); err == nil {
			return r, nil
		} else if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) || attempt >= 50 {
			return nil, fmt.Errorf("redrive: write reset %s: %w", id, err)
		}
	}
}

// Control API subjects of review-gated resets (relative to
// control.SubjectPrefix), served by platformd (internal/daemon) and called
// by `platformctl group reset --request|--approve|--execute|--show`.
const (
	SubjResetRequest = "group.reset.request"
	SubjResetApprove = "group.reset.approve"
	SubjResetExecute = "group.reset.execute"
	SubjResetShow    = "group.reset.show"
	SubjResetList    = "group.reset.list"
	// SubjResetRun runs (or dry-runs) a reset directly, audited; a topic
	// marked review: required refuses it (body: ResetRequestBody, reply:
	// catalog.GroupReset).
	SubjResetRun = "group.reset.run"
)

// ResetRequestBody asks for a reset (reply: ResetRequest). By is the
// name an unsigned request gives; a signed one's principal replaces it.
type ResetRequestBody struct {
	Reset  catalog.GroupResetRequest `json:"reset"`
	By     string                    `json:"by"`
	Reason string                    `json:"reason"`
}

// ResetDecision approves or executes request ID, or shows it (reply:
// ResetRequest, or catalog.GroupReset for execute).
type ResetDecision struct {
	ID     string `json:"id"`
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
}
