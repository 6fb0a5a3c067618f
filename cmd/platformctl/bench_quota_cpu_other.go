//go:build !unix

package main

import "time"

// processCPU is not measured here (no getrusage): the CPU figures of
// bench quota read 0.
func processCPU() time.Duration { return 0 }
