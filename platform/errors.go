package platform

import "errors"

// Sentinel errors. Match with errors.Is.
//
// Errors listing several problems (ErrInvalidSpec from Validate;
// ErrInvalidSpec, ErrConflict and ErrNotFound from catalog's Apply) are
// *validate.Error values naming each problem by its configuration key,
// e.g. "topics.orders.partitions: ...".
var (
	// ErrInvalidSpec: a topic, queue or group declaration is malformed.
	ErrInvalidSpec = errors.New("platform: invalid spec")

	// ErrConflict: a change would break a guarantee the object already
	// gives (e.g. a partition-count change breaks per-key order), or the
	// name is taken by another kind of object. Nothing was applied.
	ErrConflict = errors.New("platform: conflicting change")

	// ErrNotFound: no such topic, queue or group.
	ErrNotFound = errors.New("platform: not found")

	// ErrInvalidKey: a partition key is not a single subject token.
	ErrInvalidKey = errors.New("platform: invalid key")
)
