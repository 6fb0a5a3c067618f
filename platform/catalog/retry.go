package catalog

import (
	"context"
	"fmt"
	"time"

	"github.com/msgplatform/platform/internal/jserr"
	"github.com/msgplatform/platform/internal/retry"
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
// ctx ends (internal/retry). Each attempt gets its own AttemptTimeout;
// between attempts it backs off exponentially (50ms doubling to 2s) with
// full jitter.
func (r *Reconciler) do(ctx context.Context, what string, op func(ctx context.Context) error) error {
	start := time.Now()
	attempts := 0
	retryable := func(err error) bool {
		return transient(err) && !(jserr.HasCode(err, jserr.CodeNoPeers) && time.Since(start) > noPeersRetryFor) &&
			!(jserr.HasCode(err, jserr.CodeNoAccount) && time.Since(start) > noAccountRetryFor)
	}
	err := retry.Do(ctx, retry.Policy{Initial: 50 * time.Millisecond, Max: 2 * time.Second, MaxElapsed: r.opts.RetryFor,
		Retryable: retryable,
		Notify: func(err error, attempt int, wait time.Duration) {
			r.log.Warn("platform: retrying", "op", what, "attempt", attempt, "wait", wait, "err", err)
		},
	}, func(ctx context.Context) error {
		attempts++
		actx, cancel := context.WithTimeout(ctx, r.opts.AttemptTimeout)
		defer cancel()
		return op(actx)
	})
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil, !retryable(err):
		return fmt.Errorf("platform: %s: %w", what, err)
	default:
		return fmt.Errorf("platform: %s: still failing after %d attempts in %s: %w", what, attempts, r.opts.RetryFor, err)
	}
}
