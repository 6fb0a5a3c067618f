package retry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/msgplatform/platform/internal/retry"
)

func TestBackoffIsFullJitterDoublingToMax(t *testing.T) {
	b := &retry.Backoff{Initial: 10 * time.Millisecond, Max: 80 * time.Millisecond}
	bound := 10 * time.Millisecond
	for i := range 200 {
		d := b.NextBackOff()
		if d <= 0 || d > bound {
			t.Fatalf("wait %d: %v, want in (0, %v]", i, d, bound)
		}
		bound = min(2*bound, 80*time.Millisecond)
	}
	b.Reset()
	if d := b.NextBackOff(); d > 10*time.Millisecond {
		t.Fatalf("after Reset: %v, want <= 10ms", d)
	}
}

func TestDoStopsWhereThePolicySays(t *testing.T) {
	ctx := context.Background()
	fast := retry.Policy{Initial: time.Millisecond, Max: 2 * time.Millisecond}
	permanent := errors.New("stream not found")

	// A transient error is retried until op succeeds.
	n := 0
	if err := retry.Do(ctx, fast, func(context.Context) error {
		if n++; n < 4 {
			return nats.ErrNoResponders
		}
		return nil
	}); err != nil || n != 4 {
		t.Fatalf("transient then success: err %v after %d attempts, want nil after 4", err, n)
	}
	// An error Retryable refuses ends it at once, returned as is.
	n = 0
	if err := retry.Do(ctx, fast, func(context.Context) error { n++; return permanent }); err != permanent || n != 1 {
		t.Fatalf("permanent: err %v after %d attempts, want it after 1", err, n)
	}
	// MaxTries bounds the attempts; the last error is returned.
	n = 0
	p := fast
	p.MaxTries = 3
	if err := retry.Do(ctx, p, func(context.Context) error { n++; return nats.ErrTimeout }); !errors.Is(err, nats.ErrTimeout) || n != 3 {
		t.Fatalf("max tries: err %v after %d attempts, want ErrTimeout after 3", err, n)
	}
	// A custom Retryable and Notify.
	var notified []int
	p = fast
	p.MaxTries = 3
	p.Retryable = func(err error) bool { return err == permanent }
	p.Notify = func(_ error, attempt int, _ time.Duration) { notified = append(notified, attempt) }
	_ = retry.Do(ctx, p, func(context.Context) error { return permanent })
	if len(notified) != 2 || notified[0] != 1 || notified[1] != 2 {
		t.Fatalf("notified after attempts %v, want [1 2]", notified)
	}
	// MaxElapsed: attempts go on until it has passed, none starts well
	// after it.
	p = retry.Policy{Initial: 20 * time.Millisecond, Max: 20 * time.Millisecond, MaxElapsed: 100 * time.Millisecond}
	start := time.Now()
	var lastStart time.Duration
	_ = retry.Do(ctx, p, func(context.Context) error {
		lastStart = time.Since(start)
		return nats.ErrTimeout
	})
	if lastStart < 100*time.Millisecond || lastStart > time.Second {
		t.Errorf("the last attempt started %v after the first, want at MaxElapsed (100ms)", lastStart)
	}
}

func TestDoEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	err := retry.Do(ctx, retry.Policy{Initial: time.Hour, Max: time.Hour}, func(context.Context) error {
		n++
		cancel()
		return nats.ErrNoResponders
	})
	if !errors.Is(err, context.Canceled) || n != 1 {
		t.Fatalf("err %v after %d attempts, want context.Canceled after 1", err, n)
	}
	if err := retry.Do(ctx, retry.Policy{}, func(context.Context) error { t.Fatal("op ran after ctx ended"); return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("ended ctx: %v", err)
	}
	if retry.Sleep(ctx, time.Hour) {
		t.Fatal("Sleep with an ended ctx reported the whole wait")
	}
	if !retry.Sleep(context.Background(), time.Millisecond) {
		t.Fatal("Sleep did not report the whole wait")
	}
}
