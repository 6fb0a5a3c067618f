package platform

import (
	"strings"
	"testing"
	"time"
)

// A DLQ retention that would lose dead letters early is refused, naming
// the field: shorter than MinDLQRetention, negative, or shorter than the
// topic's own retention.
func TestDLQSpecValidation(t *testing.T) {
	t.Parallel()
	topic := func(maxAge, dlq time.Duration, owner string) TopicSpec {
		s := DefaultTopicSpec("payments")
		s.Retention.MaxAge, s.DLQ = maxAge, DLQSpec{Retention: dlq, Owner: owner}
		return s
	}
	for _, tc := range []struct {
		name string
		spec TopicSpec
		want string // "" for valid
	}{
		{"default", topic(72*time.Hour, 0, ""), ""},
		{"explicit", topic(72*time.Hour, 336*time.Hour, "payments-oncall"), ""},
		{"equal to topic", topic(72*time.Hour, 72*time.Hour, ""), ""},
		{"too short", topic(0, 30*time.Minute, ""), "dlq.retention: must be at least 1h0m0s"},
		{"negative", topic(72*time.Hour, -time.Hour, ""), "dlq.retention: must be >= 1h0m0s"},
		{"shorter than topic", topic(30*24*time.Hour, 48*time.Hour, ""), "dlq.retention: 48h0m0s is shorter than the topic's retention.max_age 720h0m0s"},
		{"owner", topic(72*time.Hour, 0, "team\nx"), "dlq.owner: must be a team name"},
	} {
		err := tc.spec.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: unexpected error %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
	q := DefaultQueueSpec("shipment-jobs")
	q.DLQ.Retention = time.Minute
	if err := q.Validate(); err == nil || !strings.Contains(err.Error(), "dlq.retention") {
		t.Errorf("queue with a 1m DLQ retention: %v", err)
	}
	// Unset, a topic retained longer than the default DLQ retention gets
	// a DLQ as long as the topic.
	if got := topic(30*24*time.Hour, 0, "").DLQSettings().Retention; got != 30*24*time.Hour {
		t.Errorf("default DLQ retention of a 30-day topic: %s", got)
	}
}
