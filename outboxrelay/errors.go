package outboxrelay

import "errors"

// Sentinel errors. Match with errors.Is.
var (
	// ErrInvalidEvent: the event cannot be enqueued (no id, a bad topic or
	// key). Nothing was written.
	ErrInvalidEvent = errors.New("outboxrelay: invalid event")

	// ErrInvalidConfig: a Config is malformed; the error is a
	// *validate.Error naming every problem.
	ErrInvalidConfig = errors.New("outboxrelay: invalid config")

	// ErrFenced: a store refused a write from a relay whose lease token is
	// older than the current one: another relay has taken over. The
	// refused relay must stop publishing; its unmarked events are
	// republished by the new one with the same Nats-Msg-Id.
	ErrFenced = errors.New("outboxrelay: fenced: another relay holds a newer lease")

	// ErrClosed: the relay or store is closed.
	ErrClosed = errors.New("outboxrelay: closed")

	// ErrInjectedFault: returned by Run when a Faults hook stopped the
	// relay (tests only).
	ErrInjectedFault = errors.New("outboxrelay: injected fault")
)
