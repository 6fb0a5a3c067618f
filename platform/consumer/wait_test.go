package consumer

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/msgplatform/platform/embeddednats/natstest"
)

// waitLen waits up to d until n, read under mu, returns exactly want,
// failing the test with what was counted otherwise.
func waitLen(t testing.TB, d time.Duration, mu *sync.Mutex, n func() int, want int, what string) {
	t.Helper()
	natstest.WaitFor(t, d, func() error {
		mu.Lock()
		defer mu.Unlock()
		if got := n(); got != want {
			return fmt.Errorf("%d of %d %s", got, want, what)
		}
		return nil
	})
}
