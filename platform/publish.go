package platform

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgplatform/platform/internal/jserr"
)

// Publish errors. Both say whether the event may have been stored, which
// is what a caller needs to decide to retry (always with the same event
// id: the stream drops a repeat within its duplicate window).
var (
	// ErrPublishRefused: the event was NOT stored. The broker refused it
	// or no stream leader was reachable (e.g. the topic's replicas lost
	// quorum). Retrying later with the same event id is safe.
	ErrPublishRefused = errors.New("platform: publish refused, event not stored")

	// ErrPublishUnknown: no acknowledgment arrived in time. The event may
	// or may not be stored; retry with the same event id so a stored copy
	// is deduplicated.
	ErrPublishUnknown = errors.New("platform: publish outcome unknown")

	// ErrInvalidEvent: the event is malformed (no id, bad topic or key).
	ErrInvalidEvent = errors.New("platform: invalid event")
)

// Event is one event published to a topic.
type Event struct {
	// ID is the event id, required: it becomes Nats-Msg-Id, so a retried
	// publish is stored once.
	ID      string
	Topic   string
	Key     string
	Headers nats.Header
	Payload []byte
}

// PublishAck is what the stream acknowledged.
type PublishAck struct {
	Stream    string `json:"stream"`
	Sequence  uint64 `json:"seq"`
	Duplicate bool   `json:"duplicate,omitempty"`
}

// PublisherOptions configure a Publisher.
type PublisherOptions struct {
	// AckTimeout bounds the wait for the stream's ack (default 5s).
	AckTimeout time.Duration
	// Retries is how many times a publish whose ack timed out is sent
	// again, with the same event id (the stream drops a stored repeat),
	// before the outcome is reported unknown (default 0).
	Retries int
	// Validator, if set, checks every event before it is sent (opt-in
	// schema validation, e.g. a schema.Validator bound to some topics).
	// A refused event is not sent and Publish returns an error wrapping
	// ErrInvalidEvent; an accepted one is stamped with
	// SchemaVersionHeader when the returned version is > 0.
	Validator Validator
	// Registerer, if set, receives platform_publish_outcomes_total{topic,
	// outcome} (ok, duplicate, refused, unknown). Publishers sharing a
	// registerer share the counter.
	Registerer prometheus.Registerer
}

// SchemaVersionHeader carries the schema version an event was validated
// against, so a consumer can choose its decoder (schema.VersionOf).
const SchemaVersionHeader = "Event-Schema-Version"

// Validator validates an event before it is published and returns the
// schema version it conforms to (0: the topic is not validated).
type Validator interface {
	Validate(topic string, ev *Event) (version int, err error)
}

// PublishStats counts publishes by outcome.
type PublishStats struct {
	OK, Duplicate, Refused, Unknown uint64
}

// Publisher publishes events to topics with their id as Nats-Msg-Id and
// classifies every failure as refused (not stored) or unknown (may be
// stored), never a bare timeout.
type Publisher struct {
	js                        jetstream.JetStream
	opts                      PublisherOptions
	ok, dup, refused, unknown atomic.Uint64
	outcomes                  *prometheus.CounterVec
}

// NewPublisher returns a Publisher over js.
func NewPublisher(js jetstream.JetStream, opts PublisherOptions) *Publisher {
	if opts.AckTimeout <= 0 {
		opts.AckTimeout = 5 * time.Second
	}
	p := &Publisher{js: js, opts: opts}
	if opts.Registerer != nil {
		cv := prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "platform_publish_outcomes_total",
			Help: "platform.Publisher publishes by topic and outcome: ok, duplicate, refused (not stored), unknown (may be stored).",
		}, []string{"topic", "outcome"})
		if err := opts.Registerer.Register(cv); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				cv, _ = are.ExistingCollector.(*prometheus.CounterVec)
			} else {
				cv = nil
			}
		}
		p.outcomes = cv
	}
	return p
}

// record counts one publish outcome.
func (p *Publisher) record(topic, outcome string, n *atomic.Uint64) {
	n.Add(1)
	if p.outcomes != nil {
		p.outcomes.WithLabelValues(topic, outcome).Inc()
	}
}

// Publish stores ev on its topic's partition for ev.Key and returns the
// stream's ack. Errors wrap ErrInvalidEvent, ErrPublishRefused or
// ErrPublishUnknown and say what to do.
func (p *Publisher) Publish(ctx context.Context, ev Event) (PublishAck, error) {
	if ev.ID == "" {
		return PublishAck{}, fmt.Errorf("%w: id is required (it is the dedupe key, Nats-Msg-Id)", ErrInvalidEvent)
	}
	if !objectNameRE.MatchString(ev.Topic) {
		return PublishAck{}, fmt.Errorf("%w: topic %q is not a topic name", ErrInvalidEvent, ev.Topic)
	}
	if err := ValidateKey(ev.Key); err != nil {
		return PublishAck{}, fmt.Errorf("%w: %w", ErrInvalidEvent, err)
	}
	version := 0
	if p.opts.Validator != nil {
		v, err := p.opts.Validator.Validate(ev.Topic, &ev)
		if err != nil {
			return PublishAck{}, fmt.Errorf("%w: event %s on %s: %w", ErrInvalidEvent, ev.ID, ev.Topic, err)
		}
		version = v
	}
	subject := TopicSubject(ev.Topic, ev.Key)
	msg := &nats.Msg{Subject: subject, Data: ev.Payload, Header: nats.Header{}}
	for k, v := range ev.Headers {
		msg.Header[k] = append([]string(nil), v...)
	}
	if version > 0 {
		msg.Header.Set(SchemaVersionHeader, strconv.Itoa(version))
	}
	InjectTrace(ctx, msg.Header)
	var (
		ack *jetstream.PubAck
		err error
	)
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, p.opts.AckTimeout)
		ack, err = p.js.PublishMsg(actx, msg, jetstream.WithMsgID(ev.ID))
		cancel()
		timedOut := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout)
		if err == nil || !timedOut || attempt >= p.opts.Retries || ctx.Err() != nil {
			break
		}
	}
	if err == nil {
		if ack.Duplicate {
			p.record(ev.Topic, "duplicate", &p.dup)
		} else {
			p.record(ev.Topic, "ok", &p.ok)
		}
		return PublishAck{Stream: ack.Stream, Sequence: ack.Sequence, Duplicate: ack.Duplicate}, nil
	}
	return PublishAck{}, p.classify(ev.Topic, subject, ev.ID, err)
}

func (p *Publisher) classify(topic, subject, id string, err error) error {
	var apiErr *jetstream.APIError
	switch {
	case jserr.NoResponders(err):
		p.record(topic, "refused", &p.refused)
		return fmt.Errorf("%w: %s (event %s): no stream leader is reachable: the topic does not exist, or its replicas have lost quorum (a majority of its nodes is down); retry later with the same event id: %v",
			ErrPublishRefused, subject, id, err)
	case errors.As(err, &apiErr):
		p.record(topic, "refused", &p.refused)
		return fmt.Errorf("%w: %s (event %s): the stream refused it: %s (code %d)", ErrPublishRefused, subject, id, apiErr.Description, apiErr.ErrorCode)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		p.record(topic, "unknown", &p.unknown)
		return fmt.Errorf("%w: %s (event %s): no ack within %s: the stream may have lost quorum or be electing a leader; the event may or may not be stored; retry with the same event id (deduplicated within the stream's duplicate window): %v",
			ErrPublishUnknown, subject, id, p.opts.AckTimeout, err)
	case errors.Is(err, context.Canceled):
		p.record(topic, "unknown", &p.unknown)
		return fmt.Errorf("%w: %s (event %s): cancelled while waiting for the ack: %w", ErrPublishUnknown, subject, id, err)
	}
	p.record(topic, "unknown", &p.unknown)
	return fmt.Errorf("%w: %s (event %s): %w", ErrPublishUnknown, subject, id, err)
}

// Stats returns the publish counts by outcome so far.
func (p *Publisher) Stats() PublishStats {
	return PublishStats{OK: p.ok.Load(), Duplicate: p.dup.Load(), Refused: p.refused.Load(), Unknown: p.unknown.Load()}
}
