package cli

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// Main runs run under a context that ends at SIGINT or SIGTERM, then exits
// the process with code(err) for the error run returned.
func Main(run func(context.Context) error, code func(error) int) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	os.Exit(code(err))
}
