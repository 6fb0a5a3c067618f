package cli

// UsageError marks an error caused by the command line itself; commands
// map it to exit code 2.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }
