package platform

import (
	"errors"
	"testing"
	"time"
)

func TestTopicSpecCleanupValidate(t *testing.T) {
	ok := DefaultTopicSpec("profiles")
	ok.Cleanup = CleanupCompact
	ok.Retention = Retention{} // compacted: bounded by its keys
	if err := ok.Validate(); err != nil {
		t.Fatalf("compact topic without retention: %v", err)
	}
	for name, mut := range map[string]func(*TopicSpec){
		"bad cleanup":          func(s *TopicSpec) { s.Cleanup = "shrink" },
		"tombstone on delete":  func(s *TopicSpec) { s.TombstoneRetention = time.Hour },
		"tombstone below 1s":   func(s *TopicSpec) { s.Cleanup = CleanupCompact; s.TombstoneRetention = time.Millisecond },
		"bad review":           func(s *TopicSpec) { s.Review = "maybe" },
		"delete w/o retention": func(s *TopicSpec) { s.Retention = Retention{} },
	} {
		s := DefaultTopicSpec("profiles")
		mut(&s)
		if err := s.Validate(); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("%s: Validate() = %v, want ErrInvalidSpec", name, err)
		}
	}
	if _, err := TombstoneEvent(DefaultTopicSpec("orders"), "1", "k"); !errors.Is(err, ErrInvalidEvent) {
		t.Errorf("tombstone on a delete topic: %v", err)
	}
}
