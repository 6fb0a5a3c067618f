package platform

import "errors"

// Sentinel errors. Match with errors.Is.
var (
	// ErrInvalidSpec: a topic, queue or group declaration is malformed.
	ErrInvalidSpec = errors.New("platform: invalid spec")

	// ErrConflict: a change would break a guarantee the object already
	// gives (e.g. a partition-count change breaks per-key order). Nothing
	// was applied.
	ErrConflict = errors.New("platform: conflicting change")

	// ErrNotFound: no such topic, queue or group.
	ErrNotFound = errors.New("platform: not found")
)
