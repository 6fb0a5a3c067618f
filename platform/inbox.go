package platform

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/tick"
	"github.com/msgplatform/platform/internal/validate"
)

// Inbox errors.
var (
	// ErrInvalidInboxConfig: an InboxConfig is malformed; the error is a
	// *validate.Error naming every problem.
	ErrInvalidInboxConfig = errors.New("platform: invalid inbox config")

	// ErrNoEventID: the message carries no Nats-Msg-Id, so the inbox
	// cannot recognise a repeat. Publish with Publisher or the outbox
	// relay, which always set it.
	ErrNoEventID = errors.New("platform: message has no event id (Nats-Msg-Id)")
)

// DefaultTopicRetention is the topic retention the inbox retention is
// checked against by default (DefaultTopicSpec's). DefaultDLQRetention
// (dlq.go) is the other.
const DefaultTopicRetention = 72 * time.Hour

// InboxMsg is what an inbox needs of a consumed message; jetstream.Msg
// satisfies it.
type InboxMsg interface {
	Headers() nats.Header
	Ack() error
}

var _ InboxMsg = (jetstream.Msg)(nil)

// InboxOutcome says what Process did with a message.
type InboxOutcome int

const (
	// InboxProcessed: the effect ran and was committed with the inbox row.
	InboxProcessed InboxOutcome = iota + 1
	// InboxDuplicate: the event was processed before; the effect was
	// skipped and the message acked.
	InboxDuplicate
)

func (o InboxOutcome) String() string {
	switch o {
	case InboxProcessed:
		return "processed"
	case InboxDuplicate:
		return "duplicate"
	}
	return "none"
}

// Inbox makes a consumer's effects happen once per event id. Tx is the
// backend's transaction (pgx.Tx for platform/inbox/pginbox, *pebble.Batch
// for platform/inbox/pebbleinbox).
//
// Process runs effect and records (consumer, event id) in one transaction,
// then acks msg. A repeat is skipped and acked; a failed effect leaves no
// row and no ack (the message is redelivered). A crash after the commit
// and before the ack causes a redelivery that Process skips.
type Inbox[Tx any] interface {
	Process(ctx context.Context, msg InboxMsg, effect func(tx Tx) error) (InboxOutcome, error)
}

// EventIDOf returns msg's event id: its Platform-Original-Msg-Id header
// on a redriven copy, else its Nats-Msg-Id.
func EventIDOf(msg InboxMsg) (string, error) {
	// A redriven or replayed copy carries a new Nats-Msg-Id (so retrying
	// the redrive never duplicates it in the stream) and the original
	// event id in OriginalMsgIDHeader: the inbox keys on the original, so
	// a consumer that already applied the event skips the copy.
	id := msg.Headers().Get(OriginalMsgIDHeader)
	if id == "" {
		id = msg.Headers().Get(jetstream.MsgIDHeader)
	}
	if id == "" {
		return "", ErrNoEventID
	}
	return id, nil
}

// OriginalMsgIDHeader carries the original event id on a redriven copy
// (see redrive), which has a Nats-Msg-Id of its own.
const OriginalMsgIDHeader = "Platform-Original-Msg-Id"

// InboxConfig configures an inbox.
type InboxConfig struct {
	// Consumer names the consumer (e.g. the group): the inbox is keyed by
	// (Consumer, event id), so two consumers of one event each run their
	// effect once.
	Consumer string
	// Retention is how long an inbox row is kept. A repeat older than this
	// would run its effect again, so it must cover the longest path an
	// event can take back to the consumer: a DLQ redrive (DLQRetention)
	// of an event replayed from the topic (TopicRetention).
	Retention time.Duration
	// DLQRetention and TopicRetention are the retentions Retention is
	// checked against (defaults 14 days and 3 days).
	DLQRetention   time.Duration
	TopicRetention time.Duration
	// PruneInterval and PruneBatch: rows past Retention are deleted every
	// PruneInterval in batches of PruneBatch (defaults 1m, 1000).
	PruneInterval time.Duration
	PruneBatch    int
}

// DefaultInboxConfig returns the defaults for consumer: retention = DLQ
// retention + topic retention (17 days).
func DefaultInboxConfig(consumer string) InboxConfig {
	return InboxConfig{
		Consumer:       consumer,
		Retention:      DefaultDLQRetention + DefaultTopicRetention,
		DLQRetention:   DefaultDLQRetention,
		TopicRetention: DefaultTopicRetention,
		PruneInterval:  time.Minute,
		PruneBatch:     1000,
	}
}

// Validate reports every problem at once, as a *validate.Error wrapping
// ErrInvalidInboxConfig.
func (c InboxConfig) Validate() error {
	var p validate.Problems
	if c.Consumer == "" || len(c.Consumer) > 200 {
		p.Addf("consumer", "must be 1..200 bytes, got %q", c.Consumer)
	}
	if c.DLQRetention < 0 {
		p.Addf("dlq_retention", "must be >= 0, got %s", c.DLQRetention)
	}
	if c.TopicRetention < 0 {
		p.Addf("topic_retention", "must be >= 0, got %s", c.TopicRetention)
	}
	switch {
	case c.Retention <= 0:
		p.Addf("retention", "must be > 0, got %s", c.Retention)
	case c.Retention < c.DLQRetention:
		p.Addf("retention", "%s is shorter than the DLQ retention (%s): an event redriven from the DLQ after its inbox row was pruned would run its effect a second time; set it to at least %s (DLQ retention + topic retention)",
			c.Retention, c.DLQRetention, c.DLQRetention+c.TopicRetention)
	}
	if c.PruneInterval <= 0 {
		p.Addf("prune_interval", "must be > 0, got %s", c.PruneInterval)
	}
	if c.PruneBatch < 1 || c.PruneBatch > 100000 {
		p.Addf("prune_batch", "must be 1..100000 (small batches keep locks short), got %d", c.PruneBatch)
	}
	return p.Err(ErrInvalidInboxConfig)
}

// RunPruner calls prune every PruneInterval until ctx ends, then
// returns nil; a failed round is left to the next one.
func (c InboxConfig) RunPruner(ctx context.Context, prune func(context.Context) (int, error)) error {
	tick.Repeat(ctx, c.PruneInterval, nil, func(bool) bool {
		_, _ = prune(ctx)
		return true
	})
	return nil
}

// InboxAckError is returned by Process when the effect was committed (or
// skipped as a repeat) but the ack failed: the message will come back and
// be skipped. It is safe to ignore.
type InboxAckError struct {
	EventID string
	Err     error
}

func (e *InboxAckError) Error() string {
	return fmt.Sprintf("platform: inbox: event %s committed but not acked (the redelivery will be skipped): %v", e.EventID, e.Err)
}

func (e *InboxAckError) Unwrap() error { return e.Err }
