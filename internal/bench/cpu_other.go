//go:build !unix

package bench

import "time"

// ProcessCPU is not measured here (no getrusage): every CPU figure
// reads 0.
func ProcessCPU() time.Duration { return 0 }
