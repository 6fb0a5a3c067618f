package dlq

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/platform"
)

// Entry headers. An entry's payload and its other headers are the
// original event's, unchanged.
const (
	HeaderReason       = "Platform-Dlq-Reason"
	HeaderClass        = "Platform-Dlq-Class"
	HeaderAttempts     = "Platform-Dlq-Attempts" // NumDelivered as the broker counted it
	HeaderStream       = "Platform-Dlq-Stream"
	HeaderSeq          = "Platform-Dlq-Seq"
	HeaderSubject      = "Platform-Dlq-Subject"
	HeaderConsumer     = "Platform-Dlq-Consumer"
	HeaderGroup        = "Platform-Dlq-Group"         // group or queue name
	HeaderTenant       = "Platform-Dlq-Tenant"        // the event's platform.HeaderTenant
	HeaderFirstFailure = "Platform-Dlq-First-Failure" // RFC 3339 nanoseconds
	HeaderLastFailure  = "Platform-Dlq-Last-Failure"
	HeaderPublished    = "Platform-Dlq-Published" // broker append time of the original
)

// ErrorClass is why a handler's failure ended the way it did; it is the
// reason class of retry and DLQ metrics and of DLQ entries.
type ErrorClass string

// Error classes.
const (
	// ClassTransient: the handler failed and may succeed later (the
	// default for any error). Retried with backoff up to MaxAttempts.
	ClassTransient ErrorClass = "transient"
	// ClassPermanent: the handler said retrying cannot help
	// (consumer.Permanent). Dead-lettered at once.
	ClassPermanent ErrorClass = "permanent"
	// ClassDecode: the event could not be decoded or validated
	// (consumer.DecodeError). Dead-lettered at once.
	ClassDecode ErrorClass = "decode"
	// ClassMaxDeliveries: the broker stopped delivering the event after
	// MaxDeliver attempts without hearing the last attempt's outcome (the
	// consumer died during it). Written by the Router.
	ClassMaxDeliveries ErrorClass = "max_deliveries"
	// ClassTerminated: a client terminated the event without copying it to
	// the DLQ first. Written by the Router.
	ClassTerminated ErrorClass = "terminated"
)

// Entry is a dead-lettered event as read back from a DLQ stream.
type Entry struct {
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

// ParseEntry reads an entry from a raw DLQ stream message.
func ParseEntry(m *jetstream.RawStreamMsg) Entry {
	h := m.Header
	e := Entry{
		Seq: m.Sequence, Time: m.Time, Payload: m.Data, Headers: h,
		Reason: h.Get(HeaderReason), Class: ErrorClass(h.Get(HeaderClass)),
		Stream: h.Get(HeaderStream), Subject: h.Get(HeaderSubject),
		Consumer: h.Get(HeaderConsumer), Group: h.Get(HeaderGroup), Tenant: h.Get(HeaderTenant),
	}
	e.Attempts, _ = strconv.Atoi(h.Get(HeaderAttempts))
	e.StreamSeq, _ = strconv.ParseUint(h.Get(HeaderSeq), 10, 64)
	e.FirstFailure, _ = time.Parse(time.RFC3339Nano, h.Get(HeaderFirstFailure))
	e.LastFailure, _ = time.Parse(time.RFC3339Nano, h.Get(HeaderLastFailure))
	e.Published, _ = time.Parse(time.RFC3339Nano, h.Get(HeaderPublished))
	return e
}

// Read returns every entry of the DLQ of a topic or queue, oldest first
// (for tests, tools and the redrive layer's preview).
func Read(ctx context.Context, js jetstream.JetStream, name string) ([]Entry, error) {
	s, err := js.Stream(ctx, platform.DLQStream(name))
	if err != nil {
		return nil, fmt.Errorf("platform: DLQ of %s: %w", name, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("platform: DLQ of %s: %w", name, err)
	}
	var out []Entry
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("platform: DLQ of %s seq %d: %w", name, seq, err)
		}
		out = append(out, ParseEntry(m))
	}
	return out, nil
}
