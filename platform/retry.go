package platform

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStream API error codes that mean "not now" rather than "no": the
// cluster is electing a leader, a peer is down or restarting, or an earlier
// change is still converging. They are retried; every other API error is
// returned at once.
//
// 10005 "no suitable peers for placement" is in between: the server places
// replicas on offline peers too, so it usually means the cluster has fewer
// servers than the replicas asked for, but a cluster that just formed
// returns it until the meta leader has heard from every peer. It is retried
// for noPeersRetryFor only.
//
// 10035 "account not found" comes from a stream or consumer peer that has
// not loaded the account yet: a tenant's account JWT is pushed to every
// node, and a node that was slow to take the update (a busy machine, a
// node that just restarted and is syncing its resolver) refuses the
// assignment until it has. It is retried for noAccountRetryFor only: an
// account that does not exist stays an error.
var transientCodes = map[jetstream.ErrorCode]bool{
	jsErrNoPeers:   true,
	jsErrNoAccount: true,
	10008:          true, // JetStream system temporarily unavailable (no meta leader)
	10009:          true, // cluster can not handle request (leader change)
	10023:          true, // insufficient resources (consumer peers offline)
	10202:          true, // cluster member change is in progress
	10226:          true, // stream reconfiguration already in progress
}

// noPeersRetryFor bounds retrying "no suitable peers for placement",
// noAccountRetryFor "account not found".
const (
	noPeersRetryFor   = 5 * time.Second
	noAccountRetryFor = 10 * time.Second
)

// jsErrNoAccount is "account not found" (see transientCodes).
const jsErrNoAccount jetstream.ErrorCode = 10035

// transient reports whether err is worth retrying: a request timeout, no
// responders (the stream or meta leader is moving), a reconnecting client,
// or one of transientCodes.
func transient(err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, nats.ErrTimeout),
		errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, nats.ErrConnectionReconnecting),
		errors.Is(err, nats.ErrDisconnected):
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && transientCodes[apiErr.ErrorCode]
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
		if !transient(err) || (hasCode(err, jsErrNoPeers) && time.Since(start) > noPeersRetryFor) ||
			(hasCode(err, jsErrNoAccount) && time.Since(start) > noAccountRetryFor) {
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
