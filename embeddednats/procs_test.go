package embeddednats

import (
	"os"
	"runtime"
	"strings"
	"testing"
)

// SetProcs raises GOMAXPROCS to MinProcs on a small machine, and leaves
// an operator's GOMAXPROCS alone.
func TestSetProcs(t *testing.T) {
	prev := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(prev) })

	t.Setenv("GOMAXPROCS", "3")
	if n, why := SetProcs(); n != prev || runtime.GOMAXPROCS(0) != prev || !strings.Contains(why, "environment") {
		t.Errorf("with GOMAXPROCS in the environment: SetProcs = %d (%s), GOMAXPROCS now %d; want %d unchanged", n, why, runtime.GOMAXPROCS(0), prev)
	}

	os.Unsetenv("GOMAXPROCS") // t.Setenv restores it afterwards
	runtime.GOMAXPROCS(runtime.NumCPU())
	want := max(runtime.NumCPU(), MinProcs)
	if n, why := SetProcs(); n != want || runtime.GOMAXPROCS(0) != want {
		t.Errorf("SetProcs = %d (%s), GOMAXPROCS now %d; want %d", n, why, runtime.GOMAXPROCS(0), want)
	}

	if runtime.NumCPU() > 1 {
		runtime.GOMAXPROCS(runtime.NumCPU() - 1) // as under a container's CPU limit
		if n, why := SetProcs(); n != runtime.NumCPU()-1 || !strings.Contains(why, "CPU limit") {
			t.Errorf("under a CPU limit: SetProcs = %d (%s), want %d unchanged", n, why, runtime.NumCPU()-1)
		}
	}
}
