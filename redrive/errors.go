package redrive

import "errors"

// Sentinel errors. Match with errors.Is.
var (
	// ErrInvalid: a request or a selection is malformed (unknown fields,
	// a bad rate, an empty selection...). Nothing was stored.
	ErrInvalid = errors.New("redrive: invalid request")

	// ErrNotFound: no such DLQ, entry or redrive request.
	ErrNotFound = errors.New("redrive: not found")

	// ErrConflict: the state transition is not allowed from the request's
	// current state, or another caller changed the state first (lost
	// compare-and-set), or another run holds the DLQ. Nothing changed.
	ErrConflict = errors.New("redrive: conflicting state change refused")

	// ErrForbidden: four-eyes rule. The DLQ's topic is marked review:
	// required and the caller is the requester (or the request is not
	// approved yet). Also the caller's Access (Service.For): it may not
	// consume what the DLQ holds or publish where the redrive sends.
	// Nothing was read or changed.
	ErrForbidden = errors.New("redrive: refused by the review rule")

	// ErrClosed: the service was closed.
	ErrClosed = errors.New("redrive: closed")
)
