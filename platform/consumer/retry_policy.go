package consumer

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/dlq"
)

type classifiedError struct {
	class dlq.ErrorClass
	err   error
}

func (e *classifiedError) Error() string { return e.err.Error() }
func (e *classifiedError) Unwrap() error { return e.err }

// Permanent marks err as permanent: the consumer runtime dead-letters the
// event at once instead of retrying it. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &classifiedError{class: dlq.ClassPermanent, err: err}
}

// DecodeError marks err as a decode or validation failure of the event
// itself: dead-lettered at once, like Permanent, with class "decode".
func DecodeError(err error) error {
	if err == nil {
		return nil
	}
	return &classifiedError{class: dlq.ClassDecode, err: err}
}

// ClassOf returns the class of a handler error: permanent or decode if err
// wraps Permanent or DecodeError (or a *json.SyntaxError /
// *json.UnmarshalTypeError, which are decode failures), transient
// otherwise. ClassOf(nil) is "".
func ClassOf(err error) dlq.ErrorClass {
	if err == nil {
		return ""
	}
	var ce *classifiedError
	if errors.As(err, &ce) {
		return ce.class
	}
	var se *json.SyntaxError
	var ue *json.UnmarshalTypeError
	if errors.As(err, &se) || errors.As(err, &ue) {
		return dlq.ClassDecode
	}
	return dlq.ClassTransient
}

// RetryPolicy decides when a transient failure is retried.
type RetryPolicy struct {
	// Delays is the backoff schedule: the wait after failed attempt n is
	// drawn uniformly from [0, Delays[min(n, len)-1]] (full jitter).
	// Default 2s, 4s, 8s, 16s.
	Delays []time.Duration
	// MaxAttempts is the number of deliveries after which a transient
	// failure is dead-lettered (default 5). For groups and queues the
	// broker's MaxDeliver of the consumer wins when it is set, so the
	// broker and the runtime agree on the count.
	MaxAttempts int
	// MinDelay is the smallest wait, so a retry never hot-loops even when
	// the jitter draws 0 (default 10ms).
	MinDelay time.Duration
	// Budget limits retries per consumer (zero value: DefaultRetryBudget).
	Budget RetryBudget
}

// RetryBudget is a token bucket of retries per consumer (one Member or
// Workers): every retry takes a token; tokens refill at PerSecond up to
// Burst. A transient failure with no token left is still retried (the
// event is not lost) but after the policy's longest delay, so an outage of
// a dependency turns into a slow trickle of retries instead of a storm.
type RetryBudget struct {
	Burst     int
	PerSecond float64
}

// DefaultRetryBudget allows bursts of 100 retries and 10 per second.
var DefaultRetryBudget = RetryBudget{Burst: 100, PerSecond: 10}

// DefaultRetryPolicy is 2s, 4s, 8s, 16s with full jitter, 5 attempts.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{
		Delays:      []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second},
		MaxAttempts: 5,
		MinDelay:    10 * time.Millisecond,
		Budget:      DefaultRetryBudget,
	}
}

// withDefaults fills the zero fields from DefaultRetryPolicy.
func (p RetryPolicy) withDefaults() RetryPolicy {
	d := DefaultRetryPolicy()
	if len(p.Delays) == 0 {
		p.Delays = d.Delays
	}
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = d.MaxAttempts
	}
	if p.MinDelay <= 0 {
		p.MinDelay = d.MinDelay
	}
	if p.Budget.Burst <= 0 {
		p.Budget = d.Budget
	}
	return p
}

// Validate reports every problem with the policy.
func (p RetryPolicy) Validate() error {
	var errs []error
	for i, d := range p.Delays {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("retry.delays[%d]: must be > 0, got %s", i, d))
		}
	}
	if p.MaxAttempts < 0 {
		errs = append(errs, fmt.Errorf("retry.max_attempts: must be >= 1, got %d", p.MaxAttempts))
	}
	if p.Budget.PerSecond < 0 {
		errs = append(errs, fmt.Errorf("retry.budget.per_second: must be >= 0, got %v", p.Budget.PerSecond))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", platform.ErrInvalidSpec, errors.Join(errs...))
	}
	return nil
}

// Ceiling is the largest wait after failed attempt n (1-based).
func (p RetryPolicy) Ceiling(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	return p.Delays[min(attempt, len(p.Delays))-1]
}

// Backoff draws the wait after failed attempt n: uniform in
// [MinDelay, Ceiling(n)] (full jitter).
func (p RetryPolicy) Backoff(attempt int) time.Duration {
	c := p.Ceiling(attempt)
	if c <= p.MinDelay {
		return p.MinDelay
	}
	return p.MinDelay + rand.N(c-p.MinDelay+1)
}

// budget is a RetryBudget's live token bucket.
type budget struct {
	mu     sync.Mutex
	cfg    RetryBudget
	tokens float64
	last   time.Time
}

func newBudget(cfg RetryBudget) *budget {
	return &budget{cfg: cfg, tokens: float64(cfg.Burst), last: time.Now()}
}

// take reports whether a retry token was available (and takes it).
func (b *budget) take() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	b.tokens = min(float64(b.cfg.Burst), b.tokens+now.Sub(b.last).Seconds()*b.cfg.PerSecond)
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true
	}
	return false
}
