package consumer

import (
	"context"
	"time"

	"github.com/msgplatform/platform/platform/dlq"
)

// retry naks a transient failure with attempts left (ClassOf, against the
// consumer's MaxDeliver) after a full-jitter backoff, or after the
// policy's longest delay when the retry budget is spent, so nothing
// blocks the partition while it waits. The first failure of an event is
// recorded (here, and in dlq.FirstFailuresBucket off the settling path) for
// its DLQ entry.
func (s *settler) retry(next Handler) Handler {
	return func(ctx context.Context, m *Message) error {
		err := next(ctx, m)
		if err == nil || m.Attempt >= s.maxAttempts {
			return err
		}
		class := ClassOf(err)
		if class != dlq.ClassTransient || !s.settleable(m) {
			return err
		}
		now := time.Now()
		s.mu.Lock()
		_, seen := s.firstFail[m.Seq]
		if !seen {
			// Not seen failing by this process: the first failure, or an
			// earlier one recorded by a process that crashed or lost the
			// partition since (recordFirst adopts that one).
			s.firstFail[m.Seq] = now
		}
		s.mu.Unlock()
		if !seen {
			s.recordFirst(m.Seq, now)
		}
		delay := s.policy.Backoff(m.Attempt)
		if !s.budget.take() {
			delay = s.policy.Ceiling(len(s.policy.Delays))
			s.metrics.budgetExhausted(s.group)
		}
		s.metrics.retried(s.group, s.partition, class)
		_ = m.raw.NakWithDelay(delay)
		m.outcome = outcomeRetry
		return err
	}
}
