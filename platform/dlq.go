package platform

import (
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/msgplatform/platform/internal/validate"
)

// Dead-letter streams (their entries, writing and reading them, and the
// router are platform/dlq's). Every topic and queue <name> (stream S =
// StreamName(name)) has two streams next to it, created by the Reconciler:
//
//   - S_dlq, subjects $DLQ.S.>: one entry per dead-lettered event, on
//     subject DLQSubject(S, consumer, seq) = $DLQ.S.<consumer>.<seq>.
//     The subjects cannot collide with any topic or queue: object names
//     start with [a-z0-9], never '$', and S has no '.', so $DLQ.orders.>
//     and $DLQ.orders_eu.> are disjoint. The stream keeps at most one
//     message per subject and refuses a second one (DiscardNewPerSubject):
//     an event is dead-lettered once per consumer, whatever the duplicate
//     window, and the Nats-Msg-Id dlq:S:<consumer>:<seq> dedupes within
//     it too. (The id names the consumer as well as the seq: two groups of
//     one topic may each dead-letter the same event.)
//   - S_dlq_events: the broker's MAX_DELIVERIES and MSG_TERMINATED
//     advisories about S's consumers, captured so that the dlq.Router can
//     dead-letter an event whose consumer died on its last attempt, even
//     if no router was running at that moment.
//
// Both keep the object's DLQ retention (DLQSpec.Retention, default
// DefaultDLQRetention, 14 days) and record the DLQ's owner (DLQSpec.Owner,
// default the object's owner) in their metadata (platform.owner).
const (
	DefaultDLQRetention = 14 * 24 * time.Hour
	// MinDLQRetention is the shortest DLQ retention a spec may set: a DLQ
	// entry is the only record of a failure, and a person must get to it.
	MinDLQRetention = time.Hour
)

// DLQStream is the dead-letter stream of a topic or queue.
func DLQStream(name string) string { return StreamName(name) + "_dlq" }

// DLQEventsStream is the advisory capture stream of a topic or queue.
func DLQEventsStream(name string) string { return StreamName(name) + "_dlq_events" }

// DLQSubject is the subject of the DLQ entry for the event at seq of
// stream, dead-lettered by consumer.
func DLQSubject(stream, consumer string, seq uint64) string {
	return "$DLQ." + stream + "." + consumer + "." + strconv.FormatUint(seq, 10)
}

// DLQSpec is the dead-letter queue settings of a topic or queue, e.g.
// dlq: {retention: 336h, owner: payments-oncall}.
//
// Retention is how long an entry is kept (0: DefaultDLQRetention, or the
// topic's max_age if longer). It must be at least MinDLQRetention and,
// for a topic with a max_age, at least that max_age: the entry is the only record that a group skipped
// the event, and it must not vanish while the event itself is still in
// the topic (a redrive or replay is then still possible). Expiry from a
// DLQ is permanent loss, so the Reconciler applies it to the DLQ and its
// advisory stream as written, and redrive warns at 80 % of it.
// Owner is the team answerable for the DLQ ("": the object's owner).
type DLQSpec struct {
	Retention time.Duration `mapstructure:"retention" json:"retention,omitempty"`
	Owner     string        `mapstructure:"owner" json:"owner,omitempty"`
}

// resolve returns s with its defaults filled in: the retention
// DefaultDLQRetention, or the topic's max_age if that is longer; the
// owner the object's owner.
func (s DLQSpec) resolve(objectOwner string, topicMaxAge time.Duration) DLQSpec {
	if s.Retention == 0 {
		s.Retention = max(DefaultDLQRetention, topicMaxAge)
	}
	if s.Owner == "" {
		s.Owner = objectOwner
	}
	return s
}

// DLQSettings returns the retention and owner the topic's DLQ gets.
func (t TopicSpec) DLQSettings() DLQSpec { return t.DLQ.resolve(t.Owner, t.Retention.MaxAge) }

// DLQSettings returns the retention and owner the queue's DLQ gets.
func (q QueueSpec) DLQSettings() DLQSpec { return q.DLQ.resolve(q.Owner, 0) }

// validateInto records the problems of the DLQ settings of an object
// whose own retention is topicMaxAge (0: none or a queue).
func (s DLQSpec) validateInto(p *validate.Problems, topicMaxAge time.Duration) {
	switch r := s.Retention; {
	case r < 0:
		p.Addf("dlq.retention", "must be >= %s (0: default %s), got %s", MinDLQRetention, DefaultDLQRetention, r)
	case r > 0 && r < MinDLQRetention:
		p.Addf("dlq.retention", "must be at least %s (0: default %s): entries expire unseen, and expiry is permanent loss; got %s", MinDLQRetention, DefaultDLQRetention, r)
	case r > 0 && r < topicMaxAge:
		p.Addf("dlq.retention", "%s is shorter than the topic's retention.max_age %s: a dead letter would expire while its event is still in the topic; set at least %s (or 0 for the default)", r, topicMaxAge, topicMaxAge)
	}
	if len(s.Owner) > 128 || strings.ContainsFunc(s.Owner, unicode.IsControl) {
		p.Addf("dlq.owner", "must be a team name of at most 128 printable characters, got %q", s.Owner)
	}
}
