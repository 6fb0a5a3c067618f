package bench

import "fmt"

// StoreOptions configure a harness that measures a database-backed
// component (an outbox or an inbox) against raw JetStream; Validate
// names the command's flags.
type StoreOptions struct {
	// DSN is a PostgreSQL DSN; the harness creates and drops its own
	// database there.
	DSN               string
	Count, Keys, Size int
	Runs              int
	// InProcess starts a temporary 3-node fabric instead of using the
	// remote platform.
	InProcess bool
	// SkipPostgres measures the Pebble backend only.
	SkipPostgres bool
	// CPUProfile is the file the command profiles the whole run to.
	CPUProfile string
}

// Validate reports the first problem.
func (o StoreOptions) Validate() error {
	if o.DSN == "" && !o.SkipPostgres {
		return fmt.Errorf("--dsn is required (or --skip-postgres)")
	}
	if o.Count < 1 || o.Keys < 1 || o.Size < 1 {
		return fmt.Errorf("--count, --keys and --size must be >= 1")
	}
	return CheckRuns(o.Runs)
}

// CheckCountSize is the problem of a harness's --count and --size (each
// at least 1), nil if none.
func CheckCountSize(count, size int) error {
	if count < 1 || size < 1 {
		return fmt.Errorf("--count and --size must be >= 1, got %d and %d", count, size)
	}
	return nil
}

// CheckRuns is the problem of a harness's --runs (1..100), nil if none.
func CheckRuns(runs int) error {
	if runs < 1 || runs > 100 {
		return fmt.Errorf("--runs must be 1..100, got %d", runs)
	}
	return nil
}
