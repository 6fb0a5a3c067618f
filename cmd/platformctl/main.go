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
// 2 for a cli.UsageError, 1 otherwise.
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	fmt.Fprintln(os.Stderr, "platformctl:", err)
	var ue cli.UsageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}
