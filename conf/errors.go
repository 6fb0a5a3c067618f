package conf

import "errors"

// Sentinel errors. Match with errors.Is.
//
// Load and Validate return a *validate.Error listing every problem by its
// key; it wraps ErrInvalid. A configuration file that is missing wraps
// fs.ErrNotExist; one that is not valid YAML wraps ErrInvalid.
var (
	// ErrInvalid: the configuration has at least one problem.
	ErrInvalid = errors.New("conf: invalid configuration")
)
