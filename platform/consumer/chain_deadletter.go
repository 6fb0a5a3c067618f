package consumer

import (
	"context"
	"fmt"
	"time"

	"github.com/msgplatform/platform/platform/dlq"
)

// deadLetter copies a failure no step below settled (permanent, decode, or
// the last attempt) to the object's DLQ, with its first failure (this
// process's, or the one in dlq.FirstFailuresBucket), then terminates it. If
// the copy fails the event is not terminated but nak'd after the
// policy's longest delay; if the broker gives up first, the dlq.Router
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
			// partition since (dlq.FirstFailuresBucket).
			first = now
			if m.Attempt > 1 {
				fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				if t, found := s.failures.Recorded(fctx, s.stream, s.consumer, m.Seq); found {
					first = t
				}
				cancel()
			}
			s.mu.Lock()
			s.firstFail[m.Seq] = first
			s.mu.Unlock()
		}
		reason := err.Error()
		if class == dlq.ClassTransient {
			reason = fmt.Sprintf("gave up after %d attempts: %s", m.Attempt, reason)
		}
		f := dlq.Failure{
			Object: s.object, Stream: s.stream, Seq: m.Seq, Subject: m.Subject,
			Consumer: s.consumer, Group: s.group, Payload: m.Data, Headers: m.Header,
			Reason: reason, Class: class, Attempts: uint64(m.Attempt), Published: m.Published,
			First: first, Last: now,
		}
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if s.fenced() {
			m.outcome = outcomeFenced
			return err
		}
		if werr := dlq.Write(dctx, s.js, f); werr != nil {
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
