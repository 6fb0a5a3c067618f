package canary

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"
)

// What the external tests (package canary_test) reach inside the
// package: they drive the Monitor against the consumer runtime.

const (
	KeyPrefix  = keyPrefix
	QueueToken = queueToken
)

var TestCtx, TestLogger = testCtx, testLogger

// testCtx returns a context ending after d or with the test.
func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// testLogger logs to stderr with PLATFORM_TEST_LOG set, else nowhere.
func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("PLATFORM_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

// CheckNow reads the ack floors and updates the ages once.
func (c *Monitor) CheckNow(ctx context.Context) error { return c.check(ctx) }

// PublishSlot publishes the canaries of slot.
func (c *Monitor) PublishSlot(ctx context.Context, slot time.Time) { c.publish(ctx, slot) }

// Objects names the topics and queues the canary covers.
func (c *Monitor) Objects() []string {
	var out []string
	for _, o := range c.objects {
		out = append(out, fmt.Sprintf("%+v", o))
	}
	return out
}

// Remembered counts the canaries remembered per partition.
func (c *Monitor) Remembered() map[string]int {
	out := map[string]int{}
	for part, recs := range c.logs {
		out[fmt.Sprintf("%v", part)] = len(recs)
	}
	return out
}
