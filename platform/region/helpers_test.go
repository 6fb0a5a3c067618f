package region

import (
	"context"
	"testing"
	"time"
)

// testCtx is a context that ends after d or with the test.
func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
