package redrive

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/auditlog"
	"github.com/msgplatform/platform/internal/retry"
)

// The audit stream is tenancy's (tenancy.AuditStream, AuditSubject): one
// log for every admin action. Redrive records use its record shape and
// the subject AuditSubject.<tenant or _>.<action>.
const (
	AuditStream  = auditlog.Stream
	AuditSubject = auditlog.Subject
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

// AuditRecord has the shape of tenancy.Record (auditlog.Record), so
// `platformctl audit` shows redrive records among the others.
type AuditRecord auditlog.Record // Target: the request id

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
		_, err = a.js.CreateStream(ctx, auditlog.StreamConfig(a.replicas))
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
	subject, b, err := auditlog.Encode(auditlog.Record(r))
	if err != nil {
		return err
	}
	if _, err := a.js.Publish(ctx, subject, b); err != nil {
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
// A read that meets no responders (a leader moving, or the ordered
// consumer just created not yet registered where it runs) is tried
// again, about ten seconds at most and bounded by
// ctx, as the tenancy audit reader does.
func readHistory(ctx context.Context, js jetstream.JetStream, tenant string, f HistoryFilter) ([]AuditRecord, error) {
	var out []AuditRecord
	err := retry.Do(ctx, retry.Policy{Initial: 100 * time.Millisecond, Max: time.Second, MaxTries: 12}, func(ctx context.Context) error {
		var err error
		out, err = readHistoryOnce(ctx, js, tenant, f)
		return err
	})
	return out, err
}

func readHistoryOnce(ctx context.Context, js jetstream.JetStream, tenant string, f HistoryFilter) ([]AuditRecord, error) {
	if f.Limit <= 0 {
		f.Limit = 200
	}
	filter := AuditSubject + ".*.redrive.>"
	if tenant != "" {
		filter = AuditSubject + "." + tenant + ".redrive.>"
	}
	// No record under the filter: say so now (a fetch from an ordered
	// consumer with nothing to deliver waits until it expires).
	s, err := js.Stream(ctx, AuditStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return []AuditRecord{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("redrive: read audit: %w", err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return nil, fmt.Errorf("redrive: read audit: %w", err)
	}
	if len(info.State.Subjects) == 0 {
		return []AuditRecord{}, nil
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
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
			if r, ok := historyRecord(msg, md, f); ok {
				out = append(out, r)
				if len(out) > f.Limit {
					out = out[1:]
				}
			}
			if md != nil && pending == 0 {
				// The last record: the fetch would wait for the rest of
				// its batch until it expires.
				break
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

// historyRecord decodes one audit record for readHistory; ok is false for
// one that does not decode or is not f.ID's.
func historyRecord(msg jetstream.Msg, md *jetstream.MsgMetadata, f HistoryFilter) (r AuditRecord, ok bool) {
	if json.Unmarshal(msg.Data(), &r) != nil || (f.ID != "" && r.Target != f.ID) {
		return r, false
	}
	if md != nil {
		r.Seq = md.Sequence.Stream
	}
	if r.Action == ActionSent {
		// Either encoding reads as []Link (a record that does not decode
		// is shown as stored).
		if ls, err := r.Links(); err == nil {
			r.After = ls
		}
	}
	return r, true
}

// SentFormat is the format of a compact redrive.sent record's After
// (SentLinks). Records written before it hold a JSON array of Link.
const SentFormat = 2

// SentLinks is the After of a redrive.sent record: the links of one batch
// as ranges, in the order they were sent. It holds everything a Link
// does (Links expands it back); a record of 500 events of one stream
// takes a few dozen bytes per event instead of about 200.
type SentLinks struct {
	Format int         `json:"format"`
	Ranges []LinkRange `json:"ranges"`
}

// LinkRange is N consecutive links: the i-th (0 ≤ i < N) ties DLQ seq
// DLQSeq+i to stream seq Seq+i of Stream, with the message id
// MsgID(<request>, DLQSeq+i).
type LinkRange struct {
	DLQSeq    uint64 `json:"dlq_seq"`
	N         int    `json:"n"`
	Stream    string `json:"stream"`
	Seq       uint64 `json:"seq"`
	Duplicate bool   `json:"duplicate,omitempty"`
	// OrigStream is every link's; the i-th link's OrigSeq is
	// OrigSeqs[i], or else OrigSeq+i (all 0 if OrigSeq is 0).
	OrigStream string   `json:"orig_stream,omitempty"`
	OrigSeq    uint64   `json:"orig_seq,omitempty"`
	OrigSeqs   []uint64 `json:"orig_seqs,omitempty"`
	// Subject is every link's subject, unless Subjects has one per link.
	Subject  string   `json:"subject,omitempty"`
	Subjects []string `json:"subjects,omitempty"`
	// OriginalIDs has one per link; absent when every one is "".
	OriginalIDs []string `json:"original_ids,omitempty"`
}

// compactLinks encodes the links of request id as ranges. Links whose
// MsgID is not MsgID(id, DLQSeq) cannot be encoded (ok false).
func compactLinks(id string, links []Link) (SentLinks, bool) {
	out := SentLinks{Format: SentFormat, Ranges: []LinkRange{}}
	subjects := make([]string, len(links))
	ids := make([]string, len(links))
	origs := make([]uint64, len(links))
	prefix := MsgID(id, 0)
	prefix = prefix[:len(prefix)-1] // "redrive:<id>:"
	var num []byte
	var r *LinkRange
	from, anyID := 0, false
	done := func(to int) { // the range holds links[from:to]
		if r == nil {
			return
		}
		if allSame(subjects[from:to]) {
			r.Subject = subjects[from]
		} else {
			r.Subjects = subjects[from:to:to]
		}
		if anyID {
			r.OriginalIDs = ids[from:to:to]
		}
		switch o := origs[from:to:to]; {
		case o[0] != 0 && ascending(o):
			r.OrigSeq = o[0]
		case !allZero(o):
			r.OrigSeqs = o
		}
	}
	for i, l := range links {
		num = strconv.AppendUint(num[:0], l.DLQSeq, 10)
		if len(l.MsgID) != len(prefix)+len(num) || l.MsgID[:len(prefix)] != prefix || l.MsgID[len(prefix):] != string(num) { // MsgID(id, l.DLQSeq), without building it
			return SentLinks{}, false
		}
		n := uint64(0)
		if r != nil {
			n = uint64(r.N)
		}
		if r == nil || l.DLQSeq != r.DLQSeq+n || l.Seq != r.Seq+n || l.Stream != r.Stream || l.Duplicate != r.Duplicate || l.OrigStream != r.OrigStream {
			done(i)
			out.Ranges = append(out.Ranges, LinkRange{DLQSeq: l.DLQSeq, Stream: l.Stream, Seq: l.Seq, Duplicate: l.Duplicate, OrigStream: l.OrigStream})
			r = &out.Ranges[len(out.Ranges)-1]
			from, anyID = i, false
		}
		r.N++
		subjects[i], ids[i], origs[i] = l.Subject, l.OriginalID, l.OrigSeq
		anyID = anyID || l.OriginalID != ""
	}
	done(len(links))
	return out, true
}

// ascending: each is the one before plus 1.
func ascending(o []uint64) bool {
	for k := 1; k < len(o); k++ {
		if o[k] != o[k-1]+1 {
			return false
		}
	}
	return true
}

func allZero(o []uint64) bool {
	for _, q := range o {
		if q != 0 {
			return false
		}
	}
	return true
}

func allSame(ss []string) bool {
	for _, s := range ss[1:] {
		if s != ss[0] {
			return false
		}
	}
	return true
}

// expand returns the links of request id that s holds, in order.
func (s SentLinks) expand(id string) ([]Link, error) {
	if s.Format != SentFormat {
		return nil, fmt.Errorf("redrive: sent links of request %s: unknown format %d (want %d)", id, s.Format, SentFormat)
	}
	total := 0
	for i, r := range s.Ranges {
		if r.N < 1 || (r.Subjects != nil && len(r.Subjects) != r.N) || (r.OriginalIDs != nil && len(r.OriginalIDs) != r.N) || (r.OrigSeqs != nil && len(r.OrigSeqs) != r.N) {
			return nil, fmt.Errorf("redrive: sent links of request %s: range %d is malformed (n=%d, %d subjects, %d original ids, %d orig seqs)", id, i, r.N, len(r.Subjects), len(r.OriginalIDs), len(r.OrigSeqs))
		}
		total += r.N
	}
	out := make([]Link, 0, total)
	for _, r := range s.Ranges {
		for i := range r.N {
			k := uint64(i)
			l := Link{DLQSeq: r.DLQSeq + k, Stream: r.Stream, Seq: r.Seq + k, Duplicate: r.Duplicate, OrigStream: r.OrigStream, Subject: r.Subject}
			l.MsgID = MsgID(id, l.DLQSeq)
			if r.OrigSeqs != nil {
				l.OrigSeq = r.OrigSeqs[i]
			} else if r.OrigSeq != 0 {
				l.OrigSeq = r.OrigSeq + k
			}
			if r.Subjects != nil {
				l.Subject = r.Subjects[i]
			}
			if r.OriginalIDs != nil {
				l.OriginalID = r.OriginalIDs[i]
			}
			out = append(out, l)
		}
	}
	return out, nil
}

// Links returns the DLQ seq → message links of a redrive.sent record, of
// either encoding: the compact one (SentLinks) or the per-event one
// ([]Link) of records written before it; nil for other records.
func (r AuditRecord) Links() ([]Link, error) {
	if r.Action != ActionSent || r.After == nil {
		return nil, nil
	}
	switch a := r.After.(type) {
	case []Link:
		return a, nil
	case SentLinks:
		return a.expand(r.Target)
	}
	b, err := json.Marshal(r.After)
	if err != nil {
		return nil, fmt.Errorf("redrive: sent links of request %s: %w", r.Target, err)
	}
	return decodeLinks(r.Target, b)
}

// decodeLinks decodes the After of a redrive.sent record as stored.
func decodeLinks(id string, b []byte) ([]Link, error) {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '[' {
		var ls []Link
		if err := json.Unmarshal(b, &ls); err != nil {
			return nil, fmt.Errorf("redrive: sent links of request %s: %w", id, err)
		}
		return ls, nil
	}
	var s SentLinks
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("redrive: sent links of request %s: %w", id, err)
	}
	return s.expand(id)
}
