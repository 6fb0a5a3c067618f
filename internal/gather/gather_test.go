package gather_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/gather"
)

func TestCollect(t *testing.T) {
	f := natstest.RunFabric(t, 1, natstest.WithSyncAlways(false))
	nc := f.Conn()
	// Three responders answer at once, a fourth 300ms later.
	for i := range 4 {
		rc := f.Conn()
		if _, err := rc.Subscribe("q", func(m *nats.Msg) {
			if i == 3 {
				time.Sleep(300 * time.Millisecond)
			}
			_ = m.Respond(fmt.Appendf(nil, "r%d", i))
		}); err != nil {
			t.Fatal(err)
		}
		if err := rc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	count := func(*nats.Msg) (bool, error) { return true, nil }

	start := time.Now()
	n, err := gather.Collect(ctx, nc, "q", nil, gather.Options{Want: 2, Wait: 5 * time.Second}, count)
	if err != nil || n != 2 || time.Since(start) > 250*time.Millisecond {
		t.Fatalf("Want 2: %d, %v after %v; want 2 at once", n, err, time.Since(start))
	}
	n, err = gather.Collect(ctx, nc, "q", nil, gather.Options{Wait: 2 * time.Second}, count)
	if err != nil || n != 4 {
		t.Fatalf("no Want, 2s: %d, %v; want all 4", n, err)
	}
	start = time.Now()
	n, err = gather.Collect(ctx, nc, "q", nil, gather.Options{Wait: 2 * time.Second, Stall: 100 * time.Millisecond}, count)
	if err != nil || n != 3 || time.Since(start) > time.Second {
		t.Fatalf("Stall 100ms: %d, %v after %v; want the 3 prompt ones", n, err, time.Since(start))
	}
	// fn decides what counts, and its error ends the gathering.
	n, err = gather.Collect(ctx, nc, "q", nil, gather.Options{Wait: 2 * time.Second}, func(m *nats.Msg) (bool, error) {
		return string(m.Data) != "r0", nil
	})
	if err != nil || n != 3 {
		t.Fatalf("r0 not counted: %d, %v; want 3", n, err)
	}
	boom := errors.New("refused")
	if _, err = gather.Collect(ctx, nc, "q", nil, gather.Options{Wait: 2 * time.Second}, func(*nats.Msg) (bool, error) { return false, boom }); err != boom {
		t.Fatalf("fn error: %v, want it returned", err)
	}
	if n, err = gather.Collect(ctx, nc, "nobody", nil, gather.Options{Wait: 2 * time.Second}, count); !errors.Is(err, gather.ErrNoResponders) || n != 0 {
		t.Fatalf("no responders: %d, %v", n, err)
	}
}
