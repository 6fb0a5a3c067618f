package consumer

import "context"

// acknowledge acks a delivery whose handler returned nil, and forgets its
// first failure. It is the innermost settling step, so it checks the fence
// first for every result: a fenced delivery is settled by nothing.
func (s *settler) acknowledge(next Handler) Handler {
	return func(ctx context.Context, m *Message) error {
		err := next(ctx, m)
		if !s.settleable(m) || err != nil {
			return err
		}
		s.forget(ctx, m)
		if m.raw.Ack() != nil {
			m.outcome = outcomeRetry // the lease expires and it comes back
			return nil
		}
		s.metrics.processed(s.group, s.partition)
		m.outcome = outcomeAcked
		return nil
	}
}
