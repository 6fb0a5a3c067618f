package tick

import (
	"context"
	"time"
)

// Repeat calls fn at every tick of d and at every signal on wake (a nil
// wake never signals), one call at a time, until ctx ends or fn returns
// false; fn's argument is true for a tick, false for a wake.
func Repeat(ctx context.Context, d time.Duration, wake <-chan struct{}, fn func(ticked bool) bool) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		ticked := false
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			ticked = true
		case <-wake:
		}
		// select picks at random among ready cases: a tick that became ready
		// together with ctx's end must not start a call.
		if ctx.Err() != nil || !fn(ticked) {
			return
		}
	}
}

// Signal wakes the loop waiting on wake (a channel of capacity 1) without
// blocking: a signal already pending stands for this one.
func Signal(wake chan<- struct{}) {
	select {
	case wake <- struct{}{}:
	default:
	}
}
