package consumer

import (
	"context"
	"fmt"
)

// Middleware wraps a Handler, as MemberConfig.Middleware and
// WorkersConfig.Middleware do (the first outermost). It may act before and
// after calling next, change the ctx or message it passes on, or return
// without calling next. It runs inside the runtime's own steps: it never
// sees a canary or an event redriven to another group, it runs in the
// delivery's span and under the runtime's panic recovery, and the error it
// returns is the one the runtime settles by (nil acks; Permanent(err)
// dead-letters at once; any other error is retried).
type Middleware func(next Handler) Handler

// compose returns the delivery chain of one consumer (a partition of a
// group, or a queue), the same for Member and Workers; outermost first:
//
//	skipCanary      ack a canary; it reaches nothing below
//	skipRedrive     ack an event redriven to another group of the topic
//	    admit ends here: Workers go on at once; Member queues the event
//	    behind its key (partitionRunner.enqueue), which goes on later
//	deadLetter      a permanent, decode or last failure: DLQ entry, then term
//	retry           a transient failure with attempts left: delayed nak
//	acknowledge     nil: ack
//	slot            Member: one of MaxConcurrency; Workers: the lease, renewed,
//	                and a failure while closing given back at once
//	trace           the consumer span and the handled metric
//	recoverPanic    a panic is a transient error
//	user            the config's Middleware, the first outermost
//	h               the handler
//
// The settling steps act on the way back up, innermost first: each acts
// only if no step below settled the delivery (Message.outcome) and the
// consumer is not fenced (settleable), so at most one ack, nak or term is
// sent per delivery and none once the consumer lost the right to.
func (s *settler) compose(slot Middleware, user []Middleware, h Handler) (admit Middleware, run Handler) {
	steps := []Middleware{s.deadLetter, s.retry, s.acknowledge, slot, s.trace, recoverPanic}
	run = wrap(h, append(steps, user...)...)
	admit = func(next Handler) Handler { return wrap(next, s.skipCanary, s.skipRedrive) }
	return admit, run
}

// wrap returns h inside mws, the first outermost; nil entries are skipped.
func wrap(h Handler, mws ...Middleware) Handler {
	for i := len(mws) - 1; i >= 0; i-- {
		if mws[i] != nil {
			h = mws[i](h)
		}
	}
	return h
}

// checkMiddleware reports a nil entry of a config's Middleware.
func checkMiddleware(mws []Middleware) error {
	for i, mw := range mws {
		if mw == nil {
			return fmt.Errorf("middleware[%d]: nil", i)
		}
	}
	return nil
}

// outcome is how a delivery was settled.
type outcome int

const (
	outcomePending outcome = iota // no step settled it yet
	outcomeFenced                 // not settled: the consumer lost the right to
	outcomeAcked
	outcomeRetry // nak'd: will come back
	outcomeDead  // copied to the DLQ, then terminated
)

// settleable reports whether a settling step may act on m: no step
// settled it yet and the consumer is not fenced. A fenced delivery is
// marked so, and no step sends anything for it.
func (s *settler) settleable(m *Message) bool {
	if m.outcome != outcomePending {
		return false
	}
	if s.fenced() {
		m.outcome = outcomeFenced
		return false
	}
	return true
}

// skip is the step that acknowledges each message matching reports true
// for without passing it on, calling acked once the ack succeeded; a
// fenced one is left alone (the next owner skips it).
func (s *settler) skip(next Handler, matching func(*Message) bool, acked func()) Handler {
	return func(ctx context.Context, m *Message) error {
		if !matching(m) {
			return next(ctx, m)
		}
		if !s.settleable(m) {
			return nil
		}
		if err := m.raw.Ack(); err == nil {
			acked()
		}
		m.outcome = outcomeAcked
		return nil
	}
}

// recoverPanic turns a panic below it into a transient error.
func recoverPanic(next Handler) Handler {
	return func(ctx context.Context, m *Message) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("platform: handler panic: %v", r)
			}
		}()
		return next(ctx, m)
	}
}
