package parallel

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestRunRunsEveryOpWithinTheBound(t *testing.T) {
	var ran, inFlight, peak atomic.Int32
	boom := errors.New("boom")
	ops := make([]func(context.Context) error, 20)
	for i := range ops {
		ops[i] = func(context.Context) error {
			n := inFlight.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			time.Sleep(2 * time.Millisecond)
			inFlight.Add(-1)
			ran.Add(1)
			if i == 5 {
				return boom
			}
			return nil
		}
	}
	if err := Run(context.Background(), 3, ops); !errors.Is(err, boom) {
		t.Fatalf("Run = %v, want the op's error", err)
	}
	if ran.Load() != 20 {
		t.Fatalf("%d of 20 ops ran: an error must not stop the others", ran.Load())
	}
	if peak.Load() > 3 {
		t.Fatalf("%d ops in flight, bound 3", peak.Load())
	}
	if err := Run(context.Background(), 2, nil); err != nil {
		t.Fatal(err)
	}
}
