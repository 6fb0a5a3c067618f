package retry

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/msgplatform/platform/internal/jserr"
)

// Policy says how Do retries.
type Policy struct {
	// Initial bounds the first wait; each further wait's bound doubles up
	// to Max (default 50ms and 2s).
	Initial, Max time.Duration
	// MaxTries bounds the attempts (0: no bound).
	MaxTries uint
	// MaxElapsed bounds the time from the first attempt: attempts go on
	// until it has passed, the last starting at it at the latest (0: no
	// bound but the context).
	MaxElapsed time.Duration
	// Retryable says whether an error is worth another attempt (default
	// jserr.Transient).
	Retryable func(err error) bool
	// Notify, if set, is called before each wait with the error, the
	// attempt that failed (from 1) and the wait.
	Notify func(err error, attempt int, wait time.Duration)
}

// Backoff is exponential backoff with full jitter; it implements
// backoff.BackOff.
type Backoff struct {
	Initial, Max time.Duration
	bound        time.Duration
}

var _ backoff.BackOff = (*Backoff)(nil)

// NextBackOff returns the next wait, uniform in (0, bound], and doubles
// the bound up to Max.
func (b *Backoff) NextBackOff() time.Duration {
	if b.bound <= 0 {
		b.bound = b.Initial
	}
	d := rand.N(b.bound) + 1
	b.bound = min(2*b.bound, b.Max)
	return d
}

// Reset starts again from Initial.
func (b *Backoff) Reset() { b.bound = 0 }

func (p *Policy) defaults() {
	if p.Initial <= 0 {
		p.Initial = 50 * time.Millisecond
	}
	if p.Max < p.Initial {
		p.Max = max(p.Initial, 2*time.Second)
	}
	if p.Retryable == nil {
		p.Retryable = jserr.Transient
	}
}

// Do runs op until it returns nil, an error p.Retryable refuses, p's
// tries or elapsed time run out, or ctx ends, and returns op's last
// error (nil on success). When ctx ends while waiting, the error wraps
// ctx's error and names op's last one.
func Do(ctx context.Context, p Policy, op func(ctx context.Context) error) error {
	p.defaults()
	if err := ctx.Err(); err != nil {
		return err
	}
	attempt := 0
	var last error
	var b backoff.BackOff = &Backoff{Initial: p.Initial, Max: p.Max}
	if p.MaxElapsed > 0 {
		b = &until{next: b, deadline: time.Now().Add(p.MaxElapsed)}
	}
	opts := []backoff.RetryOption{
		backoff.WithBackOff(b),
		backoff.WithMaxElapsedTime(0),
		backoff.WithNotify(func(err error, wait time.Duration) {
			if p.Notify != nil {
				p.Notify(err, attempt, wait)
			}
		}),
	}
	if p.MaxTries > 0 {
		opts = append(opts, backoff.WithMaxTries(p.MaxTries))
	}
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		attempt++
		last = op(ctx)
		if last != nil && !p.Retryable(last) {
			return struct{}{}, backoff.Permanent(last)
		}
		return struct{}{}, last
	}, opts...)
	if err != nil && last != nil && ctx.Err() != nil && err != last {
		return fmt.Errorf("%w (last error: %v)", err, last)
	}
	return err
}

// until clips next's waits so the last attempt starts at deadline, and
// stops after it.
type until struct {
	next     backoff.BackOff
	deadline time.Time
}

func (u *until) NextBackOff() time.Duration {
	left := time.Until(u.deadline)
	if left <= 0 {
		return backoff.Stop
	}
	return min(u.next.NextBackOff(), left)
}

func (u *until) Reset() { u.next.Reset() }

// Sleep waits d, or less if ctx ends first; it reports whether all of d
// passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
