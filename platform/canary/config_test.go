package canary

import (
	"strings"
	"testing"
	"time"
)

func TestCanaryConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	if got := DefaultConfig().EffectiveTolerance(); got != 3*time.Minute {
		t.Fatalf("default tolerance %s, want 3m", got)
	}
	err := Config{Interval: time.Millisecond, Tolerance: -1}.Validate()
	if err == nil || !strings.Contains(err.Error(), "interval:") || !strings.Contains(err.Error(), "tolerance:") {
		t.Fatalf("want both problems, got %v", err)
	}
	if err := (Config{Interval: time.Minute, Tolerance: 30 * time.Second}).Validate(); err == nil {
		t.Fatal("a tolerance shorter than the interval must be refused")
	}
	if _, err := New(nil, Config{}, nil); err == nil {
		t.Fatal("New with interval 0 must fail")
	}
}
