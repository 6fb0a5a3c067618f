package parallel

import (
	"context"
	"sync"
)

// Run runs ops with at most n at a time and returns the first error.
func Run(ctx context.Context, n int, ops []func(context.Context) error) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs error
		sem  = make(chan struct{}, n)
	)
	for _, op := range ops {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := op(ctx); err != nil {
				mu.Lock()
				if errs == nil {
					errs = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errs
}

// Wait waits for wg within ctx: nil once every goroutine wg counts has
// returned, ctx's error if ctx ends first (the goroutines go on).
func Wait(ctx context.Context, wg *sync.WaitGroup) error {
	select {
	case <-Done(wg):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Done returns a channel closed once every goroutine wg counts has
// returned.
func Done(wg *sync.WaitGroup) <-chan struct{} {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	return done
}
