package bench

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// StartCPUProfile starts a CPU profile to path (none when empty) and
// returns its stop function; its errors name the option flag.
func StartCPUProfile(flag, path string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
