package catalog

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/jserr"
)

func TestTransient(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nats.ErrTimeout, true},
		{fmt.Errorf("wrapped: %w", nats.ErrNoResponders), true},
		{context.DeadlineExceeded, true},
		{&jetstream.APIError{Code: 503, ErrorCode: 10008}, true},
		{&jetstream.APIError{Code: 400, ErrorCode: 10226}, true},
		{fmt.Errorf("create stream: %w", &jetstream.APIError{Code: 503, ErrorCode: 10035}), true}, // a peer has not loaded the account yet
		{jetstream.ErrStreamNotFound, false},
		{jetstream.ErrStreamNameAlreadyInUse, false},
		{&jetstream.APIError{Code: 400, ErrorCode: 10058}, false},
		{errors.New("anything else"), false},
		{nil, false},
	} {
		if got := transient(c.err); got != c.want {
			t.Errorf("transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestDoRetriesTransientOnly(t *testing.T) {
	r := NewReconciler(nil, ReconcilerOptions{RetryFor: 300 * time.Millisecond})
	ctx := context.Background()

	calls := 0
	err := r.do(ctx, "op", func(context.Context) error {
		calls++
		if calls < 3 {
			return nats.ErrNoResponders
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Errorf("transient then ok: %v after %d calls", err, calls)
	}

	calls = 0
	err = r.do(ctx, "op", func(context.Context) error {
		if calls++; calls < 2 {
			return &jetstream.APIError{Code: 503, ErrorCode: jserr.CodeNoAccount, Description: "account not found"}
		}
		return nil
	})
	if err != nil || calls != 2 {
		t.Errorf("account not found on a peer, then ok: %v after %d calls", err, calls)
	}

	calls = 0
	err = r.do(ctx, "op", func(context.Context) error {
		calls++
		return jetstream.ErrStreamNotFound
	})
	if !errors.Is(err, jetstream.ErrStreamNotFound) || calls != 1 {
		t.Errorf("permanent: %v after %d calls", err, calls)
	}

	began := time.Now()
	err = r.do(ctx, "op", func(context.Context) error { return nats.ErrTimeout })
	if !errors.Is(err, nats.ErrTimeout) || time.Since(began) < 300*time.Millisecond || time.Since(began) > 3*time.Second {
		t.Errorf("bounded by RetryFor: %v after %s", err, time.Since(began))
	}

	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err = r.do(cctx, "op", func(context.Context) error { return nats.ErrTimeout })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("bounded by ctx: %v", err)
	}
}
