package redrive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The audit stream is tenancy's (tenancy.AuditStream, AuditSubject): one
// log for every admin action. Redrive records use its record shape and
// the subject AuditSubject.<tenant or _>.<action>.
const (
	AuditStream  = "platform-audit"
	AuditSubject = "platform.audit"
)

// Audit actions.
const (
	ActionRequest  = "redrive.request"
	ActionApprove  = "redrive.approve"
	ActionReject   = "redrive.reject"
	ActionRun      = "redrive.run"
	ActionPause    = "redrive.pause"
	ActionResume   = "redrive.resume"
	ActionCancel   = "redrive.cancel"
	ActionAdopt    = "redrive.adopt"
	ActionSent     = "redrive.sent" // links DLQ seqs to redriven message ids
	ActionComplete = "redrive.complete"
	ActionFail     = "redrive.fail"
)

// AuditRecord has the shape of tenancy.Record, so `platformctl audit`
// shows redrive records among the others.
type AuditRecord struct {
	Seq    uint64    `json:"seq,omitempty"`
	Time   time.Time `json:"time"`
	Actor  string    `json:"actor"`
	Action string    `json:"action"`
	Tenant string    `json:"tenant,omitempty"`
	Target string    `json:"target,omitempty"` // the request id
	Before any       `json:"before,omitempty"`
	After  any       `json:"after,omitempty"`
	Detail string    `json:"detail,omitempty"`
}

// Link ties one DLQ entry to the event a run published for it.
type Link struct {
	DLQSeq uint64 `json:"dlq_seq"`
	// MsgID is the redriven event's Nats-Msg-Id: redrive:<request>:<dlq seq>.
	MsgID string `json:"msg_id"`
	// OriginalID is the event's first id (Platform-Original-Msg-Id).
	OriginalID string `json:"original_id,omitempty"`
	// OrigStream and OrigSeq locate the event that failed.
	OrigStream string `json:"orig_stream,omitempty"`
	OrigSeq    uint64 `json:"orig_seq,omitempty"`
	Subject    string `json:"subject"`
	Stream     string `json:"stream"`
	Seq        uint64 `json:"seq"`
	// Duplicate: the stream had it already (a retried run).
	Duplicate bool `json:"duplicate,omitempty"`
}

// Auditor appends audit records. StreamAuditor is the platform's.
type Auditor interface {
	Append(ctx context.Context, r AuditRecord) error
}

// StreamAuditor appends to the platform-audit stream, creating it (with
// tenancy's configuration) if tenancy has not yet.
type StreamAuditor struct {
	js       jetstream.JetStream
	replicas int
	mu       sync.Mutex
	ready    bool
}

var _ Auditor = (*StreamAuditor)(nil)

// NewStreamAuditor returns an auditor over js.
func NewStreamAuditor(js jetstream.JetStream, replicas int) *StreamAuditor {
	return &StreamAuditor{js: js, replicas: max(replicas, 1)}
}

func (a *StreamAuditor) ensure(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ready {
		return nil
	}
	_, err := a.js.Stream(ctx, AuditStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		// Same configuration as tenancy's openAudit.
		_, err = a.js.CreateStream(ctx, jetstream.StreamConfig{
			Name:        AuditStream,
			Description: "platform audit log: admin changes, quota hits, authorization denials",
			Subjects:    []string{AuditSubject + ".>"},
			Storage:     jetstream.FileStorage,
			Replicas:    a.replicas,
			MaxAge:      400 * 24 * time.Hour,
			Discard:     jetstream.DiscardOld,
		})
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			err = nil
		}
	}
	if err != nil {
		return fmt.Errorf("redrive: audit stream: %w", err)
	}
	a.ready = true
	return nil
}

// Append writes r and waits for the stream's ack.
func (a *StreamAuditor) Append(ctx context.Context, r AuditRecord) error {
	if err := a.ensure(ctx); err != nil {
		return err
	}
	if r.Time.IsZero() {
		r.Time = time.Now().UTC()
	}
	tenant := r.Tenant
	if tenant == "" {
		tenant = "_"
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if _, err := a.js.Publish(ctx, AuditSubject+"."+tenant+"."+r.Action, b); err != nil {
		return fmt.Errorf("redrive: audit %s: %w", r.Action, err)
	}
	return nil
}

// HistoryFilter selects redrive audit records.
type HistoryFilter struct {
	// Scope is the tenant whose records (control API only; "" every
	// record).
	Scope string `json:"scope,omitempty"`
	// ID keeps one request's records ("" for every request).
	ID string `json:"id,omitempty"`
	// Limit keeps the last Limit records (default 200).
	Limit int `json:"limit,omitempty"`
}

// readHistory returns the last f.Limit redrive records, oldest first: of
// tenant only, or of every tenant and the admin account when tenant is "".
func readHistory(ctx context.Context, js jetstream.JetStream, tenant string, f HistoryFilter) ([]AuditRecord, error) {
	if f.Limit <= 0 {
		f.Limit = 200
	}
	filter := AuditSubject + ".*.redrive.>"
	if tenant != "" {
		filter = AuditSubject + "." + tenant + ".redrive.>"
	}
	c, err := js.OrderedConsumer(ctx, AuditStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return []AuditRecord{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("redrive: read audit: %w", err)
	}
	out := []AuditRecord{}
	for {
		batch, err := c.Fetch(500, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return nil, fmt.Errorf("redrive: read audit: %w", err)
		}
		n := 0
		var pending uint64
		for msg := range batch.Messages() {
			n++
			md, _ := msg.Metadata()
			if md != nil {
				pending = md.NumPending
			}
			var r AuditRecord
			if json.Unmarshal(msg.Data(), &r) != nil || (f.ID != "" && r.Target != f.ID) {
				continue
			}
			if md != nil {
				r.Seq = md.Sequence.Stream
			}
			out = append(out, r)
			if len(out) > f.Limit {
				out = out[1:]
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("redrive: read audit: %w", err)
		}
		if n == 0 || pending == 0 {
			return out, nil
		}
	}
}
