package platform

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/msgplatform/platform/internal/validate"
)

func TestInboxConfigRetention(t *testing.T) {
	cfg := DefaultInboxConfig("billing")
	if want := DefaultDLQRetention + DefaultTopicRetention; cfg.Retention != want || want != 17*24*time.Hour {
		t.Errorf("default retention %s, want DLQ + topic retention = %s (17 days)", cfg.Retention, want)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	// Between the DLQ retention and DLQ + topic: accepted.
	cfg.Retention = DefaultDLQRetention
	if err := cfg.Validate(); err != nil {
		t.Errorf("retention = DLQ retention: %v", err)
	}
	cfg.Retention = 10 * 24 * time.Hour
	err := cfg.Validate()
	var verr *validate.Error
	if !errors.Is(err, ErrInvalidInboxConfig) || !errors.As(err, &verr) || !verr.Has("retention") {
		t.Fatalf("retention shorter than the DLQ's: want a retention problem, got %v", err)
	}
	for _, want := range []string{"shorter than the DLQ retention", "run its effect a second time", "at least 408h0m0s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("explanation lacks %q:\n%v", want, err)
		}
	}
	// Every problem at once.
	cfg = InboxConfig{Retention: -1, PruneBatch: 0}
	err = cfg.Validate()
	if !errors.As(err, &verr) {
		t.Fatalf("want *validate.Error, got %v", err)
	}
	for _, k := range []string{"consumer", "retention", "prune_interval", "prune_batch"} {
		if !verr.Has(k) {
			t.Errorf("no %s problem in:\n%v", k, err)
		}
	}
}

// RunPruner prunes every PruneInterval, a failed round included, and
// returns nil once ctx ends.
func TestInboxRunPrunerUntilCtxEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	err := InboxConfig{PruneInterval: time.Millisecond}.RunPruner(ctx, func(context.Context) (int, error) {
		calls++
		if calls == 3 {
			cancel()
		}
		return 0, errors.New("prune failed")
	})
	if err != nil || calls < 3 {
		t.Fatalf("RunPruner = %v after %d rounds; want nil after at least 3 (failed rounds retried)", err, calls)
	}
}
