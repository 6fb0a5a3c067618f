package redrive

import (
	"context"
	"errors"
	"fmt"

	"github.com/msgplatform/platform/internal/jserr"
	"github.com/msgplatform/platform/internal/kvlease"
	"github.com/msgplatform/platform/internal/retry"
	"github.com/msgplatform/platform/internal/tick"
)

// One runner per run: the runner of a running redrive holds the run's
// lease (internal/kvlease; key leaseKey(id) of the bucket, value the
// instance), renewed every Checkpoint (at most LeaseTTL/4) while it runs.
// A run whose lease went unrenewed for LeaseTTL (its runner crashed or
// is cut off) is adopted by the instance whose standby handle acquires
// that lease. The record's epoch still fences the record: every claim
// and adoption bumps it, and a runner writes only in its own epoch.
//
// The key is never deleted, so a running record always has one: a claim
// creates it (empty, held by nobody) before the record says running, and
// takes it (kvlease.Take) once the record is its own. A standby starts
// its TTL when it first sees the run running in an epoch, so the
// claimant's take always lands first.

func leaseKey(id string) string { return "lease." + id }

// runLease is this instance's handle on run id's lease. Its holder may
// act until a renewal (every Checkpoint) has failed for LeaseTTL -
// Checkpoint: the record's epoch, not the lease, fences what a runner
// writes, and publishes it repeats carry the same ids.
func (s *Service) runLease(id string) *kvlease.Lease {
	return kvlease.New(s.kv, leaseKey(id), func() []byte { return []byte(s.cfg.Instance) },
		kvlease.Config{TTL: s.cfg.LeaseTTL, Valid: s.cfg.LeaseTTL - s.cfg.Checkpoint})
}

// takeLease takes run id's lease for a run this instance has just
// claimed on its record, retrying for at most LeaseTTL/2: a standby
// needs a whole LeaseTTL from the claim before it may acquire.
func (s *Service) takeLease(ctx context.Context, id string) (*kvlease.Lease, error) {
	l := s.runLease(id)
	err := retry.Do(ctx, retry.Policy{MaxElapsed: s.cfg.LeaseTTL / 2, Retryable: func(error) bool { return true }}, func(ctx context.Context) error {
		_, err := l.Take(ctx)
		return err
	})
	return l, err
}

// ensureLease creates run id's lease key, held by nobody, if it is absent.
func (s *Service) ensureLease(ctx context.Context, id string) error {
	if _, err := s.kv.Create(ctx, leaseKey(id), nil); err != nil && !jserr.WrongRevision(err) {
		return fmt.Errorf("redrive: lease of %s: %w", id, err)
	}
	return nil
}

// holdLease renews l every Checkpoint (Validate keeps that at most
// LeaseTTL/4) until the returned func is called.
// A renewal that finds the lease taken over, or no longer valid, halts
// the run as fenced: it may no longer act.
func (rn *runner) holdLease(ctx context.Context, l *kvlease.Lease) (stop func()) {
	lctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick.Repeat(lctx, min(rn.s.cfg.Checkpoint, rn.s.cfg.LeaseTTL/4), nil, func(bool) bool {
			tok, err := l.Tick(lctx)
			if lctx.Err() != nil {
				return false
			}
			if tok != 0 {
				if err != nil {
					rn.s.log.Debug("redrive: run's lease not renewed yet", "request", rn.id, "err", err)
				}
				return true
			}
			if err == nil {
				err = errors.New("not held")
			}
			rn.s.log.Warn("redrive: run's lease lost; stopping the run", "request", rn.id, "err", err)
			rn.mu.Lock()
			if rn.bgErr == nil {
				rn.bgErr = fmt.Errorf("%w: lease: %w", errFenced, err)
			}
			rn.mu.Unlock()
			rn.h.halt()
			return false
		})
	}()
	return func() { cancel(); <-done }
}

// standby is adoptLoop's handle on the lease of a run that runs
// elsewhere, in the epoch it was first seen in.
type standby struct {
	epoch uint64
	l     *kvlease.Lease
}
