package embeddednats

import (
	"fmt"
	"os"
	"runtime"
)

// MinProcs is the fewest Go scheduler slots (GOMAXPROCS) a process that
// runs platform nodes gets on a small machine.
//
// Why: a nats-server moves every message through several goroutines (the
// client's read loop, the stream's queue, raft, the route and client
// write loops), and Go runs a slot's ready goroutines in turn, preempting
// one only after 10 ms. With GOMAXPROCS at 2, a burst of one tenant's
// admitted events (raft proposals, store writes) queues every other
// tenant's hops behind it; with more slots than cores, the kernel
// interleaves the threads instead, at the cost of some more CPU per event
// at low load (more thread switches).
const MinProcs = 4

// SetProcs raises GOMAXPROCS to MinProcs where the machine has fewer CPUs
// and returns the value in effect with the reason. It leaves GOMAXPROCS
// as it is when the environment sets it (the operator chose) or when the
// process may use fewer CPUs than the machine has (a container's CPU
// limit, which Go already sized GOMAXPROCS to: more threads than the
// limit would only be throttled).
func SetProcs() (int, string) {
	cur := runtime.GOMAXPROCS(0)
	switch {
	case os.Getenv("GOMAXPROCS") != "":
		return cur, "GOMAXPROCS set by the environment"
	case cur < runtime.NumCPU():
		return cur, fmt.Sprintf("CPU limit of %d below the machine's %d CPUs", cur, runtime.NumCPU())
	case cur >= MinProcs:
		return cur, fmt.Sprintf("%d CPUs", runtime.NumCPU())
	}
	runtime.GOMAXPROCS(MinProcs)
	return MinProcs, fmt.Sprintf("raised from %d CPUs to %d scheduler slots (embeddednats.MinProcs)", cur, MinProcs)
}
