package platform

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/msgplatform/platform/internal/jserr"
)

// The reconciler retries what jserr.Transient names (no answer yet, a
// leader election, a change still converging), and two codes for a
// bounded while only:
//
// 10005 "no suitable peers for placement" (jserr.CodeNoPeers): the server
// places replicas on offline peers too, so it usually means the cluster
// has fewer servers than the replicas asked for, but a cluster that just
// formed returns it until the meta leader has heard from every peer. It is
// retried for noPeersRetryFor only.
//
// 10035 "account not found" (jserr.CodeNoAccount) comes from a stream or
// consumer peer that has not loaded the account yet: a tenant's account
// JWT is pushed to every node, and a node that was slow to take the update
// (a busy machine, a node that just restarted and is syncing its resolver)
// refuses the assignment until it has. It is retried for noAccountRetryFor
// only: an account that does not exist stays an error.
// noPeersRetryFor bounds retrying "no suitable peers for placement",
// noAccountRetryFor "account not found".
const (
	noPeersRetryFor   = 5 * time.Second
	noAccountRetryFor = 10 * time.Second
)

// transient reports whether err is worth retrying (see above).
func transient(err error) bool {
	return jserr.Transient(err) || jserr.HasCode(err, jserr.CodeNoPeers) || jserr.HasCode(err, jserr.CodeNoAccount)
}

// do runs op until it succeeds, fails permanently, RetryFor has passed or
// ctx ends. Each attempt gets its own AttemptTimeout; between attempts it
// backs off exponentially (50ms doubling to 2s) with full jitter.
func (r *Reconciler) do(ctx context.Context, what string, op func(ctx context.Context) error) error {
	start := time.Now()
	deadline := start.Add(r.opts.RetryFor)
	backoff := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, r.opts.AttemptTimeout)
		err := op(actx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("platform: %s: %w (last error: %v)", what, ctx.Err(), err)
		}
		if !transient(err) || (jserr.HasCode(err, jserr.CodeNoPeers) && time.Since(start) > noPeersRetryFor) ||
			(jserr.HasCode(err, jserr.CodeNoAccount) && time.Since(start) > noAccountRetryFor) {
			return fmt.Errorf("platform: %s: %w", what, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("platform: %s: still failing after %d attempts in %s: %w", what, attempt, r.opts.RetryFor, err)
		}
		wait := rand.N(backoff) + time.Millisecond
		r.log.Warn("platform: retrying", "op", what, "attempt", attempt, "wait", wait, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("platform: %s: %w (last error: %v)", what, ctx.Err(), err)
		case <-time.After(wait):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}
