package consumer

import (
	"context"
	"fmt"
	"time"

	"github.com/msgplatform/platform/platform"
)

// deadLetter copies a failure no step below settled (permanent, decode, or
// the last attempt) to the object's DLQ, with its first failure (this
// process's, or the one in FirstFailuresBucket), then terminates it. If
// the copy fails the event is not terminated but nak'd after the
// policy's longest delay; if the broker gives up first, the DLQRouter
// copies it.
func (s *settler) deadLetter(next Handler) Handler {
	return func(ctx context.Context, m *Message) error {
		err := next(ctx, m)
		if err == nil || !s.settleable(m) {
			return err
		}
		class := ClassOf(err)
		now := time.Now()
		s.mu.Lock()
		first, ok := s.firstFail[m.Seq]
		s.mu.Unlock()
		if !ok {
			// Not seen failing by this process: the first failure, or an
			// earlier one recorded by a process that crashed or lost the
			// partition since (FirstFailuresBucket).
			first = now
			if m.Attempt > 1 {
				fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				if t, found := s.failures.recorded(fctx, s.stream, s.consumer, m.Seq); found {
					first = t
				}
				cancel()
			}
			s.mu.Lock()
			s.firstFail[m.Seq] = first
			s.mu.Unlock()
		}
		reason := err.Error()
		if class == platform.ClassTransient {
			reason = fmt.Sprintf("gave up after %d attempts: %s", m.Attempt, reason)
		}
		d := deadLetter{
			object: s.object, stream: s.stream, seq: m.Seq, subject: m.Subject,
			consumer: s.consumer, group: s.group, payload: m.Data, headers: m.Header,
			reason: reason, class: class, attempts: uint64(m.Attempt), published: m.Published,
			first: first, last: now,
		}
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if s.fenced() {
			m.outcome = outcomeFenced
			return err
		}
		if werr := writeDLQ(dctx, s.js, d); werr != nil {
			// Not copied, so not terminated: retry the dead-lettering later.
			s.metrics.dlqFailed(s.group)
			_ = m.raw.NakWithDelay(s.policy.Ceiling(len(s.policy.Delays)))
			m.outcome = outcomeRetry
			return err
		}
		s.forget(ctx, m)
		s.metrics.deadLettered(s.group, s.partition, class)
		_ = m.raw.TermWithReason(truncate("platform: dead-lettered ("+string(class)+"): "+reason, 200))
		m.outcome = outcomeDead
		return err
	}
}
