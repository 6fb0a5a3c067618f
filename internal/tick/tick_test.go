package tick_test

import (
	"context"
	"testing"
	"time"

	"github.com/msgplatform/platform/internal/tick"
)

func TestRepeatTicksUntilFnStops(t *testing.T) {
	var calls int
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick.Repeat(context.Background(), time.Millisecond, nil, func(ticked bool) bool {
			if !ticked {
				t.Errorf("call %d: ticked false without a wake channel", calls)
			}
			calls++
			return calls < 3
		})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Repeat did not return after fn returned false")
	}
	if calls != 3 {
		t.Fatalf("calls = %d, want 3 (no call after fn returns false)", calls)
	}
}

func TestRepeatWakesOnSignal(t *testing.T) {
	wake := make(chan struct{}, 1)
	tick.Signal(wake)
	tick.Signal(wake) // a pending signal stands for this one: must not block
	var got []bool
	tick.Repeat(context.Background(), time.Hour, wake, func(ticked bool) bool {
		got = append(got, ticked)
		return false
	})
	if len(got) != 1 || got[0] {
		t.Fatalf("calls = %v, want one wake call (ticked false)", got)
	}
	select {
	case <-wake:
		t.Fatal("two signals left a second one pending")
	default:
	}
}

func TestRepeatEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := 0
	tick.Repeat(ctx, time.Hour, nil, func(bool) bool { calls++; return true })
	if calls != 0 {
		t.Fatalf("calls = %d after ctx ended, want 0", calls)
	}
}
