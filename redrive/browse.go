package redrive

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/jsscan"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/dlq"
)

// Stream metadata keys the platform writes on its streams (platform/
// metadata.go and dlq.go): the replicated record of the specs.
const (
	mdKind   = "platform.kind"
	mdDLQOf  = "platform.dlq_of"
	mdOwner  = "platform.owner"
	mdReview = "platform.review"
)

// DLQ is one dead-letter queue: the DLQ stream of a topic or queue.
type DLQ struct {
	// Name is the topic or queue whose dead letters it holds.
	Name   string `json:"name"`
	Kind   string `json:"kind"` // topic, queue, or "" if the object is gone
	Stream string `json:"stream"`
	// Owner is the team answerable for the DLQ: the DLQ stream's own
	// platform.owner (the spec's dlq.owner, which defaults to the
	// object's owner), else the object's owner.
	Owner string `json:"owner,omitempty"`
	// ReviewRequired: the topic is marked review: required, so a redrive
	// needs a second person's approval.
	ReviewRequired bool      `json:"review_required,omitempty"`
	Depth          uint64    `json:"depth"`
	Bytes          uint64    `json:"bytes"`
	FirstSeq       uint64    `json:"first_seq,omitempty"`
	LastSeq        uint64    `json:"last_seq,omitempty"`
	Oldest         time.Time `json:"oldest,omitzero"`
	// OldestAge is how long the oldest entry has waited; Retention how
	// long the DLQ keeps entries (expiry there is permanent loss).
	OldestAge time.Duration `json:"oldest_age,omitempty"`
	Retention time.Duration `json:"retention"`
	// ExpiryWarning: the oldest entry has used ExpiryWarnFraction of the
	// retention.
	ExpiryWarning bool `json:"expiry_warning,omitempty"`
}

// ExpiryWarnFraction of the DLQ retention: an entry older than this is
// close to being lost for good.
const ExpiryWarnFraction = 0.8

// Entry is one DLQ entry as the browse API shows it.
type Entry struct {
	Seq         uint64    `json:"seq"`
	Time        time.Time `json:"time"` // appended to the DLQ (broker clock)
	Fingerprint string    `json:"fingerprint"`
	// EventID is the original event id (the first publish's Nats-Msg-Id,
	// kept across redrives).
	EventID      string              `json:"event_id,omitempty"`
	Reason       string              `json:"reason"`
	Class        string              `json:"class"`
	Attempts     int                 `json:"attempts"`
	Stream       string              `json:"stream"`
	StreamSeq    uint64              `json:"stream_seq"`
	Subject      string              `json:"subject"`
	Consumer     string              `json:"consumer"`
	Group        string              `json:"group,omitempty"`
	Tenant       string              `json:"tenant,omitempty"`
	FirstFailure time.Time           `json:"first_failure,omitzero"`
	LastFailure  time.Time           `json:"last_failure,omitzero"`
	Published    time.Time           `json:"published,omitzero"`
	Redriven     string              `json:"redriven_by,omitempty"` // request id if it failed again after a redrive
	Size         int                 `json:"size"`
	Headers      map[string][]string `json:"headers,omitempty"` // show only
	Payload      []byte              `json:"payload,omitempty"` // show only
}

// Group is the entries of one DLQ sharing an error fingerprint.
type Group struct {
	Fingerprint string    `json:"fingerprint"`
	Class       string    `json:"class"`
	Message     string    `json:"message"` // normalized reason
	Example     string    `json:"example"` // one entry's reason as written
	Count       int       `json:"count"`
	FirstSeen   time.Time `json:"first_seen"` // DLQ append times
	LastSeen    time.Time `json:"last_seen"`
	FirstSeq    uint64    `json:"first_seq"`
	LastSeq     uint64    `json:"last_seq"`
	Consumers   []string  `json:"consumers,omitempty"`
}

// EntryFilter selects entries of one DLQ.
type EntryFilter struct {
	// Scope is the tenant whose account holds the DLQ (control API only).
	Scope       string `json:"scope,omitempty"`
	DLQ         string `json:"dlq"`
	FromSeq     uint64 `json:"from_seq,omitempty"`
	ToSeq       uint64 `json:"to_seq,omitempty"`
	Fingerprint string `json:"fingerprint,omitempty"`
	Tenant      string `json:"tenant,omitempty"`
	// Limit bounds the entries returned (default 100, at most 10,000).
	Limit int `json:"limit,omitempty"`
	// keep, when set, hides the entries it refuses (Guard: the entries of
	// groups the caller may not consume).
	keep func(Entry) bool
}

// Headers set on every redriven event (and so found on its DLQ entry if it
// fails again: the runtime copies an event's headers into its entry).
const (
	// HeaderOriginalMsgID is the event's original id (its first
	// Nats-Msg-Id), for inboxes to catch a repeat.
	HeaderOriginalMsgID = platform.OriginalMsgIDHeader
	// HeaderRequest and HeaderDLQSeq linked a redriven event to its
	// request and to the DLQ entry it came from. Redrives no longer set
	// them: the event's id, redrive:<request>:<dlq seq> (MsgID), says
	// the same and is stored anyway (see RedriveOf, which reads both).
	HeaderRequest = "Platform-Redrive-Request"
	HeaderDLQSeq  = "Platform-Redrive-Dlq-Seq"
	// HeaderForGroup names the group (or queue) that dead-lettered the
	// event; other groups of the topic receive the redriven event too.
	HeaderForGroup = "Platform-Redrive-Group"
	// headerEventID is where the DLQ writer keeps the original
	// Nats-Msg-Id (platform/dlq.go writeDLQ).
	headerEventID = "Platform-Event-Id"
)

// dlqRef is a resolved DLQ.
type dlqRef struct {
	DLQ
	// object is the topic or queue's name in its account (Name with the
	// lister's prefix).
	object string
	info   *jetstream.StreamInfo
}

// lister lists DLQs and reads their entries.
type lister struct {
	js jetstream.JetStream
	// prefix of stored object names (a tenant's "stored."), not shown.
	prefix string
}

func isDLQStream(cfg *jetstream.StreamConfig) bool {
	if cfg.Metadata[mdKind] == "dlq" {
		return true
	}
	return strings.HasSuffix(cfg.Name, "_dlq")
}

func (l lister) describe(ctx context.Context, info *jetstream.StreamInfo, now time.Time) DLQ {
	d, _ := l.describeRef(ctx, info, now)
	return d
}

// describeRef also returns the object's stored name.
func (l lister) describeRef(ctx context.Context, info *jetstream.StreamInfo, now time.Time) (DLQ, string) {
	md := info.Config.Metadata
	name := md[mdDLQOf]
	if name == "" {
		name = strings.ReplaceAll(strings.TrimSuffix(info.Config.Name, "_dlq"), "_", ".")
	}
	d := DLQ{
		Name: strings.TrimPrefix(name, l.prefix), Stream: info.Config.Name, Owner: md[mdOwner],
		Depth: info.State.Msgs, Bytes: info.State.Bytes, Retention: info.Config.MaxAge,
	}
	if info.State.Msgs > 0 {
		d.FirstSeq, d.LastSeq, d.Oldest = info.State.FirstSeq, info.State.LastSeq, info.State.FirstTime
		d.OldestAge = max(now.Sub(d.Oldest), 0)
		if d.Retention > 0 && float64(d.OldestAge) >= ExpiryWarnFraction*float64(d.Retention) {
			d.ExpiryWarning = true
		}
	}
	if s, err := l.js.Stream(ctx, platform.StreamName(name)); err == nil {
		omd := s.CachedInfo().Config.Metadata
		d.Kind = omd[mdKind]
		if o := omd[mdOwner]; d.Owner == "" && o != "" {
			d.Owner = o // a DLQ from before DLQs recorded their owner
		}
		d.ReviewRequired = omd[mdReview] == platform.ReviewRequired
	}
	return d, name
}

// List returns every DLQ with its owner, depth and oldest age, by name.
func (l lister) List(ctx context.Context) ([]DLQ, error) {
	now := time.Now()
	out := []DLQ{}
	it := l.js.ListStreams(ctx)
	var infos []*jetstream.StreamInfo
	for info := range it.Info() {
		if isDLQStream(&info.Config) {
			infos = append(infos, info)
		}
	}
	if err := it.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return nil, fmt.Errorf("redrive: list streams: %w", err)
	}
	for _, info := range infos {
		out = append(out, l.describe(ctx, info, now))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// resolve finds a DLQ by topic or queue name ("orders") or by stream
// name ("orders_dlq").
func (l lister) resolve(ctx context.Context, name string) (dlqRef, error) {
	if name == "" {
		return dlqRef{}, fmt.Errorf("%w: name a DLQ (its topic or queue, e.g. orders)", ErrInvalid)
	}
	candidates := []string{platform.DLQStream(name)}
	if strings.HasSuffix(name, "_dlq") {
		candidates = []string{name, platform.DLQStream(name)}
	}
	if l.prefix != "" && !strings.HasPrefix(name, l.prefix) {
		candidates = append([]string{platform.DLQStream(l.prefix + name)}, candidates...)
	}
	for _, c := range candidates {
		if strings.ContainsAny(c, ". *>") {
			continue
		}
		s, err := l.js.Stream(ctx, c)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return dlqRef{}, fmt.Errorf("redrive: DLQ %s: %w", name, err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			return dlqRef{}, fmt.Errorf("redrive: DLQ %s: %w", name, err)
		}
		if !isDLQStream(&info.Config) {
			continue
		}
		d, object := l.describeRef(ctx, info, time.Now())
		return dlqRef{DLQ: d, object: object, info: info}, nil
	}
	return dlqRef{}, fmt.Errorf("%w: no DLQ for %q (no stream %s)", ErrNotFound, name, platform.DLQStream(name))
}

// toEntry converts a raw DLQ message.
func toEntry(m *jetstream.RawStreamMsg, full bool) Entry {
	d := dlq.ParseEntry(m)
	e := Entry{
		Seq: d.Seq, Time: d.Time, Reason: d.Reason, Class: string(d.Class), Attempts: d.Attempts,
		Stream: d.Stream, StreamSeq: d.StreamSeq, Subject: d.Subject, Consumer: d.Consumer, Group: d.Group, Tenant: d.Tenant,
		FirstFailure: d.FirstFailure, LastFailure: d.LastFailure, Published: d.Published,
		Fingerprint: Fingerprint(string(d.Class), d.Reason), EventID: originalID(m.Header),
		Size: len(m.Data),
	}
	if req, _, ok := RedriveOf(m.Header); ok {
		e.Redriven = req
	}
	if full {
		e.Headers, e.Payload = m.Header, m.Data
	}
	return e
}

// RedriveOf returns the request and the DLQ sequence a redriven event
// was sent for, from its id: redrive:<request>:<dlq seq> (MsgID), its
// Nats-Msg-Id on the topic and its Platform-Event-Id in a DLQ entry
// (the DLQ writer keeps a failed event's id there). Events redriven by
// earlier versions carried them in HeaderRequest and HeaderDLQSeq,
// which are read first. ok is false for an event no redrive sent.
func RedriveOf(h nats.Header) (request string, dlqSeq uint64, ok bool) {
	if r := h.Get(HeaderRequest); r != "" {
		seq, err := strconv.ParseUint(h.Get(HeaderDLQSeq), 10, 64)
		return r, seq, err == nil
	}
	id := h.Get(nats.MsgIdHdr)
	if !strings.HasPrefix(id, "redrive:") {
		id = h.Get(headerEventID)
	}
	rest, found := strings.CutPrefix(id, "redrive:")
	if !found {
		return "", 0, false
	}
	i := strings.LastIndexByte(rest, ':')
	if i <= 0 {
		return "", 0, false
	}
	seq, err := strconv.ParseUint(rest[i+1:], 10, 64)
	if err != nil {
		return "", 0, false
	}
	return rest[:i], seq, true
}

// originalID is the first id an event was published with.
func originalID(h nats.Header) string {
	if id := h.Get(HeaderOriginalMsgID); id != "" {
		return id
	}
	return h.Get(headerEventID)
}

// scan calls fn for every message of stream from seq from to the last
// message present when it starts, in order, until fn returns false.
func scan(ctx context.Context, js jetstream.JetStream, stream string, from uint64, fn func(*jetstream.RawStreamMsg) bool) error {
	if err := jsscan.Range(ctx, js, stream, from, jsscan.Options{}, fn); err != nil {
		return fmt.Errorf("redrive: %w", err)
	}
	return nil
}

func (f EntryFilter) match(e Entry) bool {
	return (f.FromSeq == 0 || e.Seq >= f.FromSeq) && (f.ToSeq == 0 || e.Seq <= f.ToSeq) &&
		(f.Fingerprint == "" || e.Fingerprint == f.Fingerprint) && (f.Tenant == "" || e.Tenant == f.Tenant) &&
		(f.keep == nil || f.keep(e))
}

// Entries lists the entries of a DLQ matching f, oldest first.
func (l lister) Entries(ctx context.Context, f EntryFilter) ([]Entry, error) {
	if f.Limit < 0 || f.Limit > 10_000 {
		return nil, fmt.Errorf("%w: limit must be 1..10000 (0: 100), got %d", ErrInvalid, f.Limit)
	}
	if f.Limit == 0 {
		f.Limit = 100
	}
	ref, err := l.resolve(ctx, f.DLQ)
	if err != nil {
		return nil, err
	}
	out := []Entry{}
	err = scan(ctx, l.js, ref.Stream, f.FromSeq, func(m *jetstream.RawStreamMsg) bool {
		if f.ToSeq > 0 && m.Sequence > f.ToSeq {
			return false
		}
		if e := toEntry(m, false); f.match(e) {
			out = append(out, e)
		}
		return len(out) < f.Limit
	})
	return out, err
}

// Show returns one entry with its payload and headers.
func (l lister) Show(ctx context.Context, dlq string, seq uint64) (Entry, error) {
	ref, err := l.resolve(ctx, dlq)
	if err != nil {
		return Entry{}, err
	}
	s, err := l.js.Stream(ctx, ref.Stream)
	if err != nil {
		return Entry{}, fmt.Errorf("redrive: %s: %w", ref.Stream, err)
	}
	m, err := s.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Entry{}, fmt.Errorf("%w: DLQ %s has no entry %d (expired, redriven, or never there; entries %d..%d)", ErrNotFound, ref.Name, seq, ref.FirstSeq, ref.LastSeq)
	}
	if err != nil {
		return Entry{}, fmt.Errorf("redrive: %s seq %d: %w", ref.Stream, seq, err)
	}
	return toEntry(m, true), nil
}

// Groups groups the entries of a DLQ (optionally of one tenant) by error
// fingerprint, largest first.
func (l lister) Groups(ctx context.Context, f EntryFilter) ([]Group, error) {
	ref, err := l.resolve(ctx, f.DLQ)
	if err != nil {
		return nil, err
	}
	byFP := map[string]*Group{}
	err = scan(ctx, l.js, ref.Stream, f.FromSeq, func(m *jetstream.RawStreamMsg) bool {
		if f.ToSeq > 0 && m.Sequence > f.ToSeq {
			return false
		}
		if e := toEntry(m, false); f.match(e) {
			addToGroup(byFP, e)
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	return sortedGroups(byFP), nil
}

func addToGroup(byFP map[string]*Group, e Entry) {
	g := byFP[e.Fingerprint]
	if g == nil {
		g = &Group{Fingerprint: e.Fingerprint, Class: e.Class, Message: NormalizeMessage(e.Reason), Example: e.Reason,
			FirstSeen: e.Time, FirstSeq: e.Seq}
		byFP[e.Fingerprint] = g
	}
	g.Count++
	g.LastSeen, g.LastSeq = e.Time, e.Seq
	if e.Time.Before(g.FirstSeen) {
		g.FirstSeen = e.Time
	}
	if len(g.Consumers) < 10 && !slices.Contains(g.Consumers, e.Consumer) {
		g.Consumers = append(g.Consumers, e.Consumer)
	}
}

func sortedGroups(byFP map[string]*Group) []Group {
	return largestFirst(byFP, func(g *Group) int { return g.Count })
}
