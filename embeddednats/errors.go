package embeddednats

import "errors"

// Sentinel errors. Match with errors.Is.
var (
	// ErrNotReady is returned when a node did not become ready (accepting
	// clients, JetStream meta leader elected) before the deadline.
	ErrNotReady = errors.New("embeddednats: node not ready")

	// ErrClosed is returned by operations on a node that was closed.
	ErrClosed = errors.New("embeddednats: node closed")

	// ErrInvalidConfig wraps every configuration problem found by Validate.
	ErrInvalidConfig = errors.New("embeddednats: invalid config")

	// ErrPortInUse is returned by Start when a configured port is taken.
	ErrPortInUse = errors.New("embeddednats: port in use")

	// ErrNoTrust is returned when the trust directory holds no operator
	// material and creating it was not allowed.
	ErrNoTrust = errors.New("embeddednats: no trust material")
)
