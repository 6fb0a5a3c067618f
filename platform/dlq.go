package platform

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/validate"
)

// Dead-letter streams. Every topic and queue <name> (stream S =
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
//     advisories about S's consumers, captured so that the DLQRouter can
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

// DLQ entry headers. An entry's payload and its other headers are the
// original event's, unchanged.
const (
	HeaderDLQReason       = "Platform-Dlq-Reason"
	HeaderDLQClass        = "Platform-Dlq-Class"
	HeaderDLQAttempts     = "Platform-Dlq-Attempts" // NumDelivered as the broker counted it
	HeaderDLQStream       = "Platform-Dlq-Stream"
	HeaderDLQSeq          = "Platform-Dlq-Seq"
	HeaderDLQSubject      = "Platform-Dlq-Subject"
	HeaderDLQConsumer     = "Platform-Dlq-Consumer"
	HeaderDLQGroup        = "Platform-Dlq-Group" // group or queue name
	HeaderDLQTenant       = "Platform-Dlq-Tenant"
	HeaderDLQFirstFailure = "Platform-Dlq-First-Failure" // RFC 3339 nanoseconds
	HeaderDLQLastFailure  = "Platform-Dlq-Last-Failure"
	HeaderDLQPublished    = "Platform-Dlq-Published" // broker append time of the original
	// HeaderTenant is the header carrying the tenant of an event, copied
	// into HeaderDLQTenant.
	HeaderTenant = "Platform-Tenant"
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

// ErrorClass is why a handler's failure ended the way it did; it is the
// reason class of retry and DLQ metrics and of DLQ entries.
type ErrorClass string

// Error classes.
const (
	// ClassTransient: the handler failed and may succeed later (the
	// default for any error). Retried with backoff up to MaxAttempts.
	ClassTransient ErrorClass = "transient"
	// ClassPermanent: the handler said retrying cannot help
	// (Permanent(err)). Dead-lettered at once.
	ClassPermanent ErrorClass = "permanent"
	// ClassDecode: the event could not be decoded or validated
	// (DecodeError(err)). Dead-lettered at once.
	ClassDecode ErrorClass = "decode"
	// ClassMaxDeliveries: the broker stopped delivering the event after
	// MaxDeliver attempts without hearing the last attempt's outcome (the
	// consumer died during it). Written by the DLQRouter.
	ClassMaxDeliveries ErrorClass = "max_deliveries"
	// ClassTerminated: a client terminated the event without copying it to
	// the DLQ first. Written by the DLQRouter.
	ClassTerminated ErrorClass = "terminated"
)

// DLQEntry is a dead-lettered event as read back from a DLQ stream.
type DLQEntry struct {
	// Seq is the entry's sequence in the DLQ stream; Time its append time.
	Seq  uint64
	Time time.Time
	// Payload and Headers are the original event's (Headers also holds
	// the Platform-Dlq-* fields below).
	Payload  []byte
	Headers  nats.Header
	Reason   string
	Class    ErrorClass
	Attempts int
	// Stream, StreamSeq and Subject locate the original event.
	Stream    string
	StreamSeq uint64
	Subject   string
	Consumer  string
	Group     string
	Tenant    string
	// FirstFailure and LastFailure are the consumer's clock; Published is
	// the broker's append time of the original event.
	FirstFailure, LastFailure, Published time.Time
}

// ParseDLQEntry reads an entry from a raw DLQ stream message.
func ParseDLQEntry(m *jetstream.RawStreamMsg) DLQEntry {
	h := m.Header
	e := DLQEntry{
		Seq: m.Sequence, Time: m.Time, Payload: m.Data, Headers: h,
		Reason: h.Get(HeaderDLQReason), Class: ErrorClass(h.Get(HeaderDLQClass)),
		Stream: h.Get(HeaderDLQStream), Subject: h.Get(HeaderDLQSubject),
		Consumer: h.Get(HeaderDLQConsumer), Group: h.Get(HeaderDLQGroup), Tenant: h.Get(HeaderDLQTenant),
	}
	e.Attempts, _ = strconv.Atoi(h.Get(HeaderDLQAttempts))
	e.StreamSeq, _ = strconv.ParseUint(h.Get(HeaderDLQSeq), 10, 64)
	e.FirstFailure, _ = time.Parse(time.RFC3339Nano, h.Get(HeaderDLQFirstFailure))
	e.LastFailure, _ = time.Parse(time.RFC3339Nano, h.Get(HeaderDLQLastFailure))
	e.Published, _ = time.Parse(time.RFC3339Nano, h.Get(HeaderDLQPublished))
	return e
}

// ReadDLQ returns every entry of the DLQ of a topic or queue, oldest
// first (for tests, tools and the redrive layer's preview).
func ReadDLQ(ctx context.Context, js jetstream.JetStream, name string) ([]DLQEntry, error) {
	s, err := js.Stream(ctx, DLQStream(name))
	if err != nil {
		return nil, fmt.Errorf("platform: DLQ of %s: %w", name, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("platform: DLQ of %s: %w", name, err)
	}
	var out []DLQEntry
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("platform: DLQ of %s seq %d: %w", name, seq, err)
		}
		out = append(out, ParseDLQEntry(m))
	}
	return out, nil
}
