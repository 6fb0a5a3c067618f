package redrive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/kvlease"
	"github.com/msgplatform/platform/internal/retry"
	"github.com/msgplatform/platform/internal/tick"
)

// The state transitions of a redrive: each a compare-and-set on the
// record (Service.update), audited after it wins.

// Approve approves a requested redrive. On a topic marked review:
// required the approver must not be the requester (ErrForbidden).
func (s *Service) Approve(ctx context.Context, id, actor, note string) (Status, error) {
	if actor == "" {
		return Status{}, fmt.Errorf("%w: name the approver", ErrInvalid)
	}
	r, rev, err := s.update(ctx, id, func(r *Redrive) error {
		switch {
		case r.State == StateApproved:
			return fmt.Errorf("%w: redrive %s is already approved by %s", ErrConflict, id, r.ApprovedBy)
		case r.State != StateRequested:
			return errState(r, "approve")
		case r.ReviewRequired && actor == r.Requester:
			return fmt.Errorf("%w: %s is marked review: required: redrive %s was requested by %s and must be approved by someone else", ErrForbidden, r.Object, id, actor)
		}
		r.step(actor, StateApproved, note)
		r.ApprovedBy = actor
		return nil
	})
	if err != nil {
		return Status{}, err
	}
	s.auditf(ctx, AuditRecord{Actor: actor, Action: ActionApprove, Target: id, Detail: note,
		After: map[string]any{"dlq": r.Object, "requester": r.Requester, "total": r.Total, "review_required": r.ReviewRequired}})
	return r.status(rev), nil
}

// Reject refuses a requested or approved redrive.
func (s *Service) Reject(ctx context.Context, id, actor, note string) (Status, error) {
	return s.transition(ctx, id, actor, note, ActionReject, "reject", StateRejected, StateRequested, StateApproved)
}

// Cancel ends a redrive that is not finished. A running one stops
// sending before its next publish; Cancel returns once its runner has
// stopped and its publishes in flight are acknowledged (see Pause).
func (s *Service) Cancel(ctx context.Context, id, actor, note string) (Status, error) {
	return s.transition(ctx, id, actor, note, ActionCancel, "cancel", StateCancelled, StateRequested, StateApproved, StateRunning, StatePaused)
}

// Pause stops a running redrive; Resume continues it from where it
// stopped. The runner stops before its next publish (signalled directly
// when it runs in this service, through a watch on the record
// otherwise), and Pause returns once it has stopped and its publishes in
// flight are acknowledged and written to its progress: after Pause
// returns, no event of the run reaches the destination. It waits at most
// stopWait for that (a runner on a node that is gone never answers; its
// run is adopted, paused, after LeaseTTL).
func (s *Service) Pause(ctx context.Context, id, actor, note string) (Status, error) {
	return s.transition(ctx, id, actor, note, ActionPause, "pause", StatePaused, StateRunning)
}

func (s *Service) transition(ctx context.Context, id, actor, note, action, verb string, to State, from ...State) (Status, error) {
	if actor == "" {
		return Status{}, fmt.Errorf("%w: name who %ss", ErrInvalid, verb)
	}
	var was State
	r, rev, err := s.update(ctx, id, func(r *Redrive) error {
		ok := false
		for _, f := range from {
			ok = ok || r.State == f
		}
		if !ok {
			return errState(r, verb)
		}
		was = r.State
		r.step(actor, to, note)
		if to == StatePaused {
			r.PauseReason = "paused by " + actor
			if note != "" {
				r.PauseReason += ": " + note
			}
		}
		if to.Terminal() {
			r.Progress.FinishedAt = time.Now().UTC()
		}
		return nil
	})
	if err != nil {
		return Status{}, err
	}
	if to == StateCancelled && was != StateRunning {
		s.unlock(ctx, r.DLQStream, id)
	}
	if was == StateRunning {
		s.awaitStopped(ctx, id, rev)
	}
	s.auditf(ctx, AuditRecord{Actor: actor, Action: action, Target: id, Detail: note,
		Before: map[string]any{"state": was}, After: map[string]any{"state": to, "dlq": r.Object, "sent": r.Progress.Sent, "total": r.Total}})
	return r.status(rev), nil
}

// Run starts a redrive: an approved one, or a requested one whose topic
// needs no review. Exactly one of concurrent callers wins; the others get
// ErrConflict.
func (s *Service) Run(ctx context.Context, id, actor, note string) (Status, error) {
	return s.claim(ctx, id, actor, note, false)
}

// Resume continues a paused redrive (after a canary pause, the operator
// accepts the risk: the rest is sent, and the failure rate is judged anew
// on what is sent from now).
func (s *Service) Resume(ctx context.Context, id, actor, note string) (Status, error) {
	return s.claim(ctx, id, actor, note, true)
}

func (s *Service) claim(ctx context.Context, id, actor, note string, resume bool) (Status, error) {
	if actor == "" {
		return Status{}, fmt.Errorf("%w: name who runs it", ErrInvalid)
	}
	r, _, err := s.get(ctx, id)
	if err != nil {
		return Status{}, err
	}
	if err := runnable(r, resume); err != nil {
		return Status{}, err
	}
	var watchFrom uint64
	if r.Progress.WatchFrom == 0 && r.WatchDLQ != "" {
		if st, err := s.js.Stream(ctx, r.WatchDLQ); err == nil {
			if info, err := st.Info(ctx); err == nil {
				watchFrom = info.State.LastSeq + 1
			}
		}
		if watchFrom == 0 {
			return Status{}, fmt.Errorf("redrive: read DLQ %s to watch for re-failures", r.WatchDLQ)
		}
	}
	if err := s.ensureLease(ctx, id); err != nil {
		return Status{}, err
	}
	if err := s.lock(ctx, r.DLQStream, id); err != nil {
		return Status{}, err
	}
	now := time.Now().UTC()
	r, rev, err := s.update(ctx, id, func(r *Redrive) error {
		if err := runnable(r, resume); err != nil {
			return err
		}
		r.step(actor, StateRunning, note)
		r.Runner, r.PauseReason = s.cfg.Instance, ""
		r.Epoch++
		p := &r.Progress
		if p.WatchFrom == 0 {
			p.WatchFrom = watchFrom
		}
		if p.StartedAt.IsZero() {
			p.StartedAt = now
		}
		p.UpdatedAt = now
		if resume {
			p.BaseSent, p.BaseRefailed = p.Sent, p.Refailed
			if p.Phase == PhaseSampleWait {
				p.Phase = PhaseMain
			}
		}
		return nil
	})
	if err != nil {
		if cur, _, gerr := s.get(ctx, id); gerr == nil && cur.State != StateRunning {
			s.unlock(ctx, cur.DLQStream, id)
		}
		return Status{}, err
	}
	action := ActionRun
	if resume {
		action = ActionResume
	}
	s.auditf(ctx, AuditRecord{Actor: actor, Action: action, Target: id, Detail: note, After: map[string]any{
		"dlq": r.Object, "runner": r.Runner, "epoch": r.Epoch, "total": r.Total, "next": r.Progress.Next,
		"rate": r.Rate, "sample_size": r.SampleSize, "approved_by": r.ApprovedBy}})
	s.startLocal(id, r.Epoch, nil)
	return r.status(rev), nil
}

func runnable(r *Redrive, resume bool) error {
	switch {
	case r.State == StateRunning:
		return fmt.Errorf("%w: redrive %s is already running (runner %s)", ErrConflict, r.ID, r.Runner)
	case resume && r.State != StatePaused:
		return errState(r, "resume")
	case resume:
		return nil
	case r.State == StatePaused:
		return fmt.Errorf("%w: redrive %s is paused (%s): resume it", ErrConflict, r.ID, r.PauseReason)
	case r.State == StateRequested && r.ReviewRequired:
		return fmt.Errorf("%w: %s is marked review: required: redrive %s needs approval by someone other than its requester %s before it runs", ErrForbidden, r.Object, r.ID, r.Requester)
	case r.State != StateApproved && r.State != StateRequested:
		return errState(r, "run")
	}
	return nil
}

// lock takes the DLQ's run lock for request id: one run per DLQ at a time
// (selections of two requests may overlap). A lock held by a request
// that is no longer running is taken over.
func (s *Service) lock(ctx context.Context, stream, id string) error {
	key := lockKey(stream)
	for range 10 {
		_, err := s.kv.Create(ctx, key, []byte(id))
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("redrive: lock %s: %w", stream, err)
		}
		e, err := s.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("redrive: lock %s: %w", stream, err)
		}
		holder := string(e.Value())
		if holder == id {
			return nil
		}
		hr, _, herr := s.get(ctx, holder)
		if herr == nil && hr.State == StateRunning {
			return fmt.Errorf("%w: DLQ %s is being redriven by request %s (one run per DLQ at a time); pause or cancel it first", ErrConflict, hr.Object, holder)
		}
		if _, err := s.kv.Update(ctx, key, []byte(id), e.Revision()); err == nil {
			return nil
		}
	}
	return fmt.Errorf("%w: DLQ %s lock is contended; retry", ErrConflict, stream)
}

func (s *Service) unlock(ctx context.Context, stream, id string) {
	ctx = context.WithoutCancel(ctx)
	e, err := s.kv.Get(ctx, lockKey(stream))
	if err != nil || string(e.Value()) != id {
		return
	}
	_ = s.kv.Delete(ctx, lockKey(stream), jetstream.LastRevision(e.Revision()))
}

// runSignals are a local run's halt signal and its end.
type runSignals struct {
	h    *halter
	done chan struct{} // closed when the run's goroutine returns
}

// localSignals maps each *localRun of every Service to its runSignals.
var localSignals sync.Map

func signalsOf(lr *localRun) *runSignals {
	if lr == nil {
		return nil
	}
	if v, ok := localSignals.Load(lr); ok {
		return v.(*runSignals)
	}
	return nil
}

// stopWait bounds how long Pause and Cancel wait for a running redrive's
// runner to stop.
const stopWait = 10 * time.Second

// awaitStopped halts the local runner of id, if any, and waits until it
// has stopped; for a runner elsewhere, until the record is written after
// revision rev (the runner's final progress: a runner that finds its run
// paused writes nothing before it has drained its publishes).
func (s *Service) awaitStopped(ctx context.Context, id string, rev uint64) {
	ctx, cancel := context.WithTimeout(ctx, stopWait)
	defer cancel()
	s.mu.Lock()
	lr := s.runs[id]
	s.mu.Unlock()
	if sig := signalsOf(lr); sig != nil {
		sig.h.halt()
		select {
		case <-sig.done:
		case <-ctx.Done():
			s.log.Warn("redrive: the runner did not stop in time", "request", id, "waited", stopWait)
		}
		return
	}
	for ctx.Err() == nil {
		e, err := s.kv.Get(ctx, recKey(id))
		if err != nil || e.Revision() > rev {
			return
		}
		var r Redrive
		if json.Unmarshal(e.Value(), &r) == nil && r.Runner == s.cfg.Instance {
			return // this instance's run, already over
		}
		retry.Sleep(ctx, 10*time.Millisecond)
	}
}

// startLocal runs id in epoch here, holding its lease l (nil: the run
// takes it).
func (s *Service) startLocal(id string, epoch uint64, l *kvlease.Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.ctx == nil {
		return
	}
	if old := s.runs[id]; old != nil {
		old.cancel() // an older epoch: fenced anyway
	}
	ctx, cancel := context.WithCancel(s.ctx)
	lr := &localRun{epoch: epoch, cancel: cancel}
	sig := &runSignals{h: newHalter(), done: make(chan struct{})}
	localSignals.Store(lr, sig)
	s.runs[id] = lr
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer cancel()
		defer localSignals.Delete(lr)
		defer close(sig.done)
		s.execute(ctx, id, epoch, sig.h, l)
		s.mu.Lock()
		if s.runs[id] == lr {
			delete(s.runs, id)
		}
		s.mu.Unlock()
	}()
}

func (s *Service) runningLocally(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runs[id] != nil
}

// adoptLoop takes over running redrives whose runner stopped renewing
// their lease.
func (s *Service) adoptLoop() {
	defer s.wg.Done()
	s.adopt(s.ctx)
	tick.Repeat(s.ctx, s.cfg.AdoptInterval, nil, func(bool) bool {
		s.adopt(s.ctx)
		return true
	})
}

// adopt ticks a standby handle on the lease of every run running
// elsewhere and adopts those whose lease it acquires. The standby handles
// are adoptLoop's alone.
func (s *Service) adopt(ctx context.Context) {
	ids, err := s.storedIDs(ctx, "req")
	if err != nil {
		return
	}
	watched := map[string]bool{}
	defer func() {
		for id := range s.standbys {
			if !watched[id] {
				delete(s.standbys, id)
			}
		}
	}()
	for _, id := range ids {
		if ctx.Err() != nil {
			return
		}
		r, e, err := s.get(ctx, id)
		if err != nil || r.State != StateRunning || s.runningLocally(id) {
			continue
		}
		watched[id] = true
		sb := s.standbys[id]
		if sb == nil || sb.epoch != r.Epoch {
			sb = &standby{epoch: r.Epoch, l: s.runLease(id)}
			s.standbys[id] = sb
		}
		if tok, _ := sb.l.Tick(ctx); tok == 0 {
			continue
		}
		delete(s.standbys, id)
		silent := time.Since(e.Created())
		seen, old := e.Revision(), r.Runner
		r, _, err = s.update(ctx, id, func(r *Redrive) error {
			if r.State != StateRunning {
				return errState(r, "adopt")
			}
			if r.Epoch != sb.epoch {
				return fmt.Errorf("%w: redrive %s was claimed again (epoch %d)", ErrConflict, id, r.Epoch)
			}
			r.Runner = s.cfg.Instance
			r.Epoch++
			r.Progress.UpdatedAt = time.Now().UTC()
			r.Steps = append(r.Steps, Step{Time: r.Progress.UpdatedAt, Actor: s.cfg.Instance, From: StateRunning, To: StateRunning,
				Note: fmt.Sprintf("adopted: runner %s silent for %s", old, silent.Round(time.Millisecond))})
			return nil
		})
		if err != nil {
			sb.l.Drop()
			continue
		}
		s.log.Warn("redrive: adopted a run whose runner went silent", "request", id, "runner", old, "silent", silent, "revision", seen)
		s.auditf(ctx, AuditRecord{Actor: s.cfg.Instance, Action: ActionAdopt, Target: id,
			Detail: fmt.Sprintf("runner %s silent for %s; continuing from entry %d of %d", old, silent.Round(time.Millisecond), r.Progress.Next, r.Total)})
		s.startLocal(id, r.Epoch, sb.l)
	}
}
