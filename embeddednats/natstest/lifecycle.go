package natstest

import (
	"context"
	"testing"
	"time"

	"github.com/msgplatform/platform/embeddednats"
)

// Lifecycle is a component with the platform's lifecycle: Start returns
// when it is ready, Close drains it within its ctx (a node, a fabric, a
// set of regions, a tenancy manager, a daemon).
type Lifecycle interface {
	Start(ctx context.Context) error
	Close(ctx context.Context) error
}

// Start starts c within d, failing the test when it does not start, and
// closes c within 10 s when the test ends.
func Start(t testing.TB, c Lifecycle, d time.Duration) {
	t.Helper()
	if err := start(t, c, d); err != nil {
		t.Fatalf("natstest: start: %v", err)
	}
}

// start starts c within d and returns Start's error; once c started, it
// is closed within 10 s when the test ends.
func start(t testing.TB, c Lifecycle, d time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		return err
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return nil
}

// Trust is the operator material under dir/trust, created there when
// absent; the test fails when it cannot be read or written.
func Trust(t testing.TB, dir string) *embeddednats.Trust {
	t.Helper()
	trust, err := embeddednats.LoadOrCreateTrust(dir + "/trust")
	if err != nil {
		t.Fatalf("natstest: trust: %v", err)
	}
	return trust
}
