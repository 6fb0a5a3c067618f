package attack

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

var mu sync.Mutex

// Refused records that route name held in t: when t ends without
// failing, it logs and appends "attack.<name>: refused" to the file
// PLATFORM_ATTACK_LOG names (if set).
func Refused(t testing.TB, name string) {
	t.Helper()
	t.Cleanup(func() {
		if t.Failed() || t.Skipped() {
			return
		}
		line := fmt.Sprintf("attack.%s: refused", name)
		t.Log(line)
		path := os.Getenv("PLATFORM_ATTACK_LOG")
		if path == "" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			t.Errorf("attack log: %v", err)
			return
		}
		defer f.Close()
		if _, err := fmt.Fprintln(f, line); err != nil {
			t.Errorf("attack log: %v", err)
		}
	})
}
