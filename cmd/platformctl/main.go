// Command platformctl is the operator CLI of the messaging platform.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/msgplatform/platform/internal/cli"
)

func main() {
	cli.Main(newRootCmd().ExecuteContext, exitCode)
}

// exitCode reports err on stderr and maps it to the exit code: 0 for none,
// 2 for a usageError, 1 otherwise.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	fmt.Fprintln(os.Stderr, "platformctl:", err)
	var ue usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

// usageError marks an error caused by the command line itself (exit code 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }
