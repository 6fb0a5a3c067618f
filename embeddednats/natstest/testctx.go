package natstest

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"
)

// Context returns a context that ends after d or when the test ends,
// whichever comes first.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Logger logs at debug level to stderr when PLATFORM_TEST_LOG is set, and
// is nil (the callee's default: no output) otherwise.
func Logger(testing.TB) *slog.Logger {
	if os.Getenv("PLATFORM_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}
