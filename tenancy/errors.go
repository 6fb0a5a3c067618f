package tenancy

import "errors"

// Sentinel errors. Match with errors.Is.
var (
	// ErrInvalid: a tenant, user or quota is malformed. Nothing changed.
	ErrInvalid = errors.New("tenancy: invalid input")

	// ErrNotFound: no such tenant, user, topic, queue or group.
	ErrNotFound = errors.New("tenancy: not found")

	// ErrConflict: the change would lose data or clash with existing
	// state (the tenant exists, has data, is suspended...). Nothing
	// changed.
	ErrConflict = errors.New("tenancy: conflicting change refused")

	// ErrPush: no node of the cluster accepted an account JWT. The
	// registry was not changed; retrying is safe.
	ErrPush = errors.New("tenancy: account update not accepted by the cluster")

	// ErrClosed: the manager was closed.
	ErrClosed = errors.New("tenancy: closed")
)
