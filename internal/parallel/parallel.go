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
