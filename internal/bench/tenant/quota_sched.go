package tenant

import (
	"fmt"
	"math"
	"os"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"time"
)

// schedLatencies is the Go runtime's histogram of how long goroutines
// waited, runnable, for a P (/sched/latencies:seconds). With --in-process
// every server, the ingest and the publishers share this process's Ps:
// B's tail follows this histogram's, not the process's CPU.
type schedLatencies struct {
	counts  []uint64
	buckets []float64
}

func readSchedLatencies() schedLatencies {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return schedLatencies{}
	}
	h := s[0].Value.Float64Histogram()
	return schedLatencies{counts: slices.Clone(h.Counts), buckets: h.Buckets}
}

// since describes the waits recorded after o: count and percentiles
// (each the upper bound of its histogram bucket).
func (h schedLatencies) since(o schedLatencies) string {
	if len(h.counts) == 0 || len(o.counts) != len(h.counts) {
		return "scheduling latency unknown"
	}
	d := make([]uint64, len(h.counts))
	var n uint64
	for i := range h.counts {
		d[i] = h.counts[i] - o.counts[i]
		n += d[i]
	}
	q := func(p float64) time.Duration {
		var c uint64
		for i, v := range d {
			if c += v; float64(c) >= p*float64(n) {
				upper := h.buckets[i+1]
				if math.IsInf(upper, 1) { // the last bucket has no upper bound
					upper = h.buckets[i]
				}
				return time.Duration(upper * float64(time.Second))
			}
		}
		return 0
	}
	return fmt.Sprintf("goroutine scheduling latency (%d waits) p50 %s p99 %s p99.9 %s", n, q(0.5), q(0.99), q(0.999))
}

// machineCPU is the CPU time all processes have used (Linux /proc/stat:
// every state but idle and iowait), 0 where it cannot be read.
func machineCPU() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0
	}
	var ticks int64
	for i, v := range f[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		t, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0
		}
		ticks += t
	}
	return time.Duration(ticks) * (time.Second / 100) // USER_HZ
}
