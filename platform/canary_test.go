package platform

import (
	"strings"
	"testing"
	"time"
)

func TestCanaryKeysCoverEveryPartition(t *testing.T) {
	for n := 1; n <= MaxPartitions; n++ {
		keys := CanaryKeys(n)
		if len(keys) != n {
			t.Fatalf("%d partitions: %d keys", n, len(keys))
		}
		for p, k := range keys {
			if got := PartitionOf(k, n); got != p {
				t.Fatalf("%d partitions: key %q maps to %d, want %d", n, k, got, p)
			}
			if err := ValidateKey(k); err != nil || !strings.HasPrefix(k, canaryKeyPrefix) {
				t.Fatalf("%d partitions: key %q: %v", n, k, err)
			}
		}
	}
	if CanaryKey(24, 7) != CanaryKeys(24)[7] {
		t.Fatal("CanaryKey disagrees with CanaryKeys")
	}
}

func TestCanaryOptOutIsRecordedOnTheStream(t *testing.T) {
	off := false
	topic := DefaultTopicSpec("orders")
	if md := TopicStreamConfig(topic).Metadata; md[mdCanary] != "" {
		t.Fatalf("default topic records %s=%q: existing streams would show a change", mdCanary, md[mdCanary])
	}
	topic.Canary = &off
	cfg := TopicStreamConfig(topic)
	back, err := TopicFromStream(&cfg)
	if err != nil || back.CanaryEnabled() {
		t.Fatalf("topic opt-out read back: %+v, %v", back, err)
	}
	q := DefaultQueueSpec("jobs")
	q.Canary = &off
	qcfg := QueueStreamConfig(q)
	qback, err := QueueFromStream(&qcfg)
	if err != nil || qback.CanaryEnabled() {
		t.Fatalf("queue opt-out read back: %+v, %v", qback, err)
	}
	if !DefaultQueueSpec("jobs").CanaryEnabled() || !DefaultTopicSpec("orders").CanaryEnabled() {
		t.Fatal("canary must be on by default")
	}
}

func TestCanaryConfigValidate(t *testing.T) {
	if err := DefaultCanaryConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	if got := DefaultCanaryConfig().EffectiveTolerance(); got != 3*time.Minute {
		t.Fatalf("default tolerance %s, want 3m", got)
	}
	err := CanaryConfig{Interval: time.Millisecond, Tolerance: -1}.Validate()
	if err == nil || !strings.Contains(err.Error(), "interval:") || !strings.Contains(err.Error(), "tolerance:") {
		t.Fatalf("want both problems, got %v", err)
	}
	if err := (CanaryConfig{Interval: time.Minute, Tolerance: 30 * time.Second}).Validate(); err == nil {
		t.Fatal("a tolerance shorter than the interval must be refused")
	}
	if _, err := NewCanary(nil, CanaryConfig{}, nil); err == nil {
		t.Fatal("NewCanary with interval 0 must fail")
	}
}
