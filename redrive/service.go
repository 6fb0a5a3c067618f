package redrive

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	mrand "math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/jserr"
	"github.com/msgplatform/platform/internal/kvutil"
	"github.com/msgplatform/platform/internal/parallel"
	"github.com/msgplatform/platform/internal/retry"
	"github.com/msgplatform/platform/internal/wire"
	"github.com/msgplatform/platform/platform"
)

// Service browses DLQs and runs redrives: requests, approvals and runs
// kept in the replicated Bucket, every transition by compare-and-set.
type Service struct {
	js    jetstream.JetStream // the account holding the DLQs
	ctl   jetstream.JetStream // the PLATFORM account: bucket and audit
	cfg   Config
	log   *slog.Logger
	l     lister
	audit Auditor
	kv    jetstream.KeyValue

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	runs   map[string]*localRun
	closed bool
	// standbys are adoptLoop's handles on the leases of runs running
	// elsewhere (lease.go).
	standbys map[string]*standby
	once     sync.Once

	// The runs' shared connection (wirepath.go), guarded by wmu.
	wmu      sync.Mutex
	wc       *wire.Conn
	wrefs    int
	wclosed  func()
	wretryAt time.Time // no dial before this after a failed one
}

type localRun struct {
	epoch  uint64
	cancel context.CancelFunc
}

// New returns a service over js; Start opens the bucket.
func New(js jetstream.JetStream, cfg Config) (*Service, error) {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctl := cfg.Control
	if ctl == nil {
		ctl = js
	}
	a := cfg.Auditor
	if a == nil {
		a = NewStreamAuditor(ctl, cfg.Replicas)
	}
	return &Service{js: js, ctl: ctl, cfg: cfg, log: log, l: lister{js: js, prefix: cfg.NamePrefix}, audit: a, runs: map[string]*localRun{}, standbys: map[string]*standby{}}, nil
}

// Start opens (or creates) the bucket and starts adopting runs whose
// runner is gone. It returns when ready.
func (s *Service) Start(ctx context.Context) error {
	kv, err := s.openBucket(ctx)
	if err != nil {
		return fmt.Errorf("redrive: bucket %s: %w", TenantBucket(s.cfg.Tenant), err)
	}
	s.kv = kv
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(1)
	go s.adoptLoop()
	return nil
}

// openBucket creates or opens the bucket. Every platformd of a region
// does this at start, concurrently: a request lost to a leader election
// or a create race is retried with a bounded wait per attempt until ctx
// ends.
func (s *Service) openBucket(ctx context.Context) (jetstream.KeyValue, error) {
	desc := "platform redrive requests, approvals and runs"
	if s.cfg.Tenant != "" {
		desc += " of tenant " + s.cfg.Tenant
	}
	cfg := jetstream.KeyValueConfig{
		Bucket: TenantBucket(s.cfg.Tenant), Description: desc,
		Replicas: s.cfg.Replicas, Storage: jetstream.FileStorage, History: 1,
	}
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		kv, err := s.ctl.CreateOrUpdateKeyValue(actx, cfg)
		if err != nil {
			kv, err = s.ctl.KeyValue(actx, cfg.Bucket)
		}
		if err == nil {
			// Requests, approvals and runs are read to be changed, by
			// whichever platformd a command reaches: a replica behind the
			// write just made on another would answer with the state
			// before it (not approved yet, not found).
			kv, err = platform.LeaderReads(actx, s.ctl, kv)
		}
		cancel()
		if err == nil {
			return kv, nil
		}
		s.log.Debug("redrive: opening bucket, retrying", "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (last error: %v)", ctx.Err(), err)
		case <-time.After(time.Duration(100+mrand.IntN(400)) * time.Millisecond):
		}
	}
}

// Close stops the runs of this instance without changing their state
// (another instance, or this one restarted, adopts them after LeaseTTL)
// and waits for them within ctx. Idempotent.
func (s *Service) Close(ctx context.Context) error {
	s.once.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		if s.cancel != nil {
			s.cancel()
		}
	})
	return parallel.Wait(ctx, &s.wg)
}

// Instance is this service's runner name.
func (s *Service) Instance() string { return s.cfg.Instance }

// Tenant is the tenant whose DLQs the service serves ("" for the
// platform admin account).
func (s *Service) Tenant() string { return s.cfg.Tenant }

// ListDLQs returns every DLQ with owner, depth and oldest age.
func (s *Service) ListDLQs(ctx context.Context) ([]DLQ, error) { return s.l.List(ctx) }

// DescribeDLQ returns one DLQ.
func (s *Service) DescribeDLQ(ctx context.Context, name string) (DLQ, error) {
	ref, err := s.l.resolve(ctx, name)
	return ref.DLQ, err
}

// Entries lists a DLQ's entries.
func (s *Service) Entries(ctx context.Context, f EntryFilter) ([]Entry, error) {
	return s.l.Entries(ctx, f)
}

// Show returns one entry with payload and headers.
func (s *Service) Show(ctx context.Context, dlq string, seq uint64) (Entry, error) {
	return s.l.Show(ctx, dlq, seq)
}

// Groups groups a DLQ's entries by error fingerprint.
func (s *Service) Groups(ctx context.Context, f EntryFilter) ([]Group, error) {
	return s.l.Groups(ctx, f)
}

// History returns the redrive audit records.
func (s *Service) History(ctx context.Context, f HistoryFilter) ([]AuditRecord, error) {
	return readHistory(ctx, s.ctl, s.cfg.Tenant, f)
}

// Preview is what a redrive would send: a dry run.
type Preview struct {
	ID             string  `json:"id,omitempty"`
	DLQ            string  `json:"dlq"`
	Object         string  `json:"object"`
	ReviewRequired bool    `json:"review_required"`
	Total          int     `json:"total"`              // entries that would be sent
	Excluded       int     `json:"excluded,omitempty"` // matched, but without an original subject
	Gone           int     `json:"gone,omitempty"`     // frozen, but no longer in the DLQ
	FirstSeq       uint64  `json:"first_seq,omitempty"`
	LastSeq        uint64  `json:"last_seq,omitempty"`
	Groups         []Group `json:"groups"`
	// Destinations counts the subjects the events would go to (top 10).
	Destinations []DestCount `json:"destinations"`
	Rate         float64     `json:"rate"`
	SampleSize   int         `json:"sample_size"`
	// Duration estimates the run at Rate, sample window included.
	Duration time.Duration `json:"duration,omitempty"`
	WatchDLQ string        `json:"watch_dlq,omitempty"`
}

// DestCount is how many events go to one subject.
type DestCount struct {
	Subject string `json:"subject"`
	Count   int    `json:"count"`
}

// frozen is a resolved selection.
type frozen struct {
	ref      dlqRef
	seqs     []uint64
	groups   map[string]*Group
	dests    map[string]int
	excluded int
	watch    string
	cgroups  map[string]bool // Entry.Group of the frozen entries
}

// destination is where an entry goes: the request's destination, or its
// original publish subject (for a topic <topic>.<key>: the stored subject
// carries the partition, which the topic's subject transform adds).
func destination(dest, object, kind string, e Entry) string {
	if dest != "" {
		return dest
	}
	if e.Subject == "" {
		return ""
	}
	if kind == "topic" {
		if key, _, ok := platform.KeyOf(object, e.Subject); ok {
			return platform.TopicSubject(object, key)
		}
	}
	return e.Subject
}

func (s *Service) freeze(ctx context.Context, req Request) (*frozen, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	ref, err := s.l.resolve(ctx, req.DLQ)
	if err != nil {
		return nil, err
	}
	req.Destination = s.storedSubject(req.Destination)
	f := &frozen{ref: ref, groups: map[string]*Group{}, dests: map[string]int{}, cgroups: map[string]bool{}}
	sel := req.Selection
	want := map[uint64]bool{}
	from, to := sel.FromSeq, sel.ToSeq
	if len(sel.Seqs) > 0 {
		from, to = sel.Seqs[0], sel.Seqs[0]
		for _, q := range sel.Seqs {
			want[q] = true
			from, to = min(from, q), max(to, q)
		}
	}
	if to == 0 {
		to = ref.LastSeq // frozen: nothing that fails after now
	}
	var tooMany bool
	err = scan(ctx, s.js, ref.Stream, from, func(m *jetstream.RawStreamMsg) bool {
		if m.Sequence > to {
			return false
		}
		e := toEntry(m, false)
		switch {
		case len(want) > 0 && !want[e.Seq]:
			return true
		case sel.Fingerprint != "" && e.Fingerprint != sel.Fingerprint:
			return true
		}
		delete(want, e.Seq)
		d := destination(req.Destination, ref.object, ref.Kind, e)
		if d == "" {
			f.excluded++
			return true
		}
		if len(f.seqs) >= MaxSelection {
			tooMany = true
			return false
		}
		f.seqs = append(f.seqs, e.Seq)
		f.dests[d]++
		f.cgroups[e.Group] = true
		addToGroup(f.groups, e)
		return true
	})
	if err != nil {
		return nil, err
	}
	if tooMany {
		return nil, fmt.Errorf("%w: the selection matches more than %d entries; narrow it (a sequence range or a fingerprint)", ErrInvalid, MaxSelection)
	}
	if len(want) > 0 {
		missing := make([]uint64, 0, len(want))
		for q := range want {
			missing = append(missing, q)
		}
		sort.Slice(missing, func(i, j int) bool { return missing[i] < missing[j] })
		return nil, fmt.Errorf("%w: DLQ %s has no entries %s (expired, redriven, or never there; entries %d..%d)", ErrInvalid, ref.Name, seqList(missing, 10), ref.FirstSeq, ref.LastSeq)
	}
	if len(f.seqs) == 0 {
		note := ""
		if f.excluded > 0 {
			note = fmt.Sprintf(" (%d matched but have no original subject: their payload was lost)", f.excluded)
		}
		return nil, fmt.Errorf("%w: the selection matches no entry of DLQ %s (entries %d..%d, depth %d)%s", ErrInvalid, ref.Name, ref.FirstSeq, ref.LastSeq, ref.Depth, note)
	}
	// Where re-failures land: the DLQ of the stream taking the destination.
	f.watch = ref.Stream
	if req.Destination != "" {
		stream, err := s.js.StreamNameBySubject(ctx, req.Destination)
		if err != nil {
			return nil, fmt.Errorf("%w: destination %s is not captured by any stream (redriven events would be lost): %v", ErrInvalid, req.Destination, err)
		}
		if err := checkRedriveResidency(ctx, s.js, ref.Stream, stream); err != nil {
			return nil, err
		}
		f.watch = ""
		if _, err := s.js.Stream(ctx, stream+"_dlq"); err == nil {
			f.watch = stream + "_dlq"
		}
	}
	if f.watch == "" && req.SampleSize > 0 {
		return nil, fmt.Errorf("%w: the destination's stream has no DLQ, so the sample's outcome cannot be observed; use sample size 0", ErrInvalid)
	}
	return f, nil
}

func seqList(seqs []uint64, n int) string {
	parts := make([]string, 0, n)
	for i, q := range seqs {
		if i == n {
			parts = append(parts, fmt.Sprintf("and %d more", len(seqs)-n))
			break
		}
		parts = append(parts, strconv.FormatUint(q, 10))
	}
	return strings.Join(parts, ", ")
}

func (f *frozen) preview(req Request) Preview {
	p := Preview{
		DLQ: f.ref.Name, Object: f.ref.Name, ReviewRequired: f.ref.ReviewRequired, Total: len(f.seqs), Excluded: f.excluded,
		Groups: sortedGroups(f.groups), Rate: req.Rate, SampleSize: req.SampleSize, WatchDLQ: f.watch,
	}
	if len(f.seqs) > 0 {
		p.FirstSeq, p.LastSeq = f.seqs[0], f.seqs[len(f.seqs)-1]
	}
	for d, n := range f.dests {
		p.Destinations = append(p.Destinations, DestCount{Subject: d, Count: n})
	}
	sort.Slice(p.Destinations, func(i, j int) bool {
		if p.Destinations[i].Count != p.Destinations[j].Count {
			return p.Destinations[i].Count > p.Destinations[j].Count
		}
		return p.Destinations[i].Subject < p.Destinations[j].Subject
	})
	if len(p.Destinations) > 10 {
		p.Destinations = p.Destinations[:10]
	}
	if req.Rate > 0 {
		p.Duration = time.Duration(float64(p.Total) / req.Rate * float64(time.Second))
	}
	if req.SampleSize > 0 {
		p.Duration += sampleWindow(req)
	}
	return p
}

func sampleWindow(r Request) time.Duration {
	if r.SampleWindow > 0 {
		return r.SampleWindow
	}
	return DefaultSampleWindow
}

// Preview resolves req's selection and reports what a run would send,
// grouped by fingerprint, without storing or sending anything.
func (s *Service) Preview(ctx context.Context, req Request) (Preview, error) {
	f, err := s.freeze(ctx, req)
	if err != nil {
		return Preview{}, err
	}
	return f.preview(req), nil
}

// storedSubject is a destination as stored in the service's account: a
// tenant names its topic's subject (payments.<key>), which the platform
// stores under the NamePrefix (stored.payments.<key>). Redriven events
// are published there directly: they bypass the tenant's publish-rate
// ingest (the request's rate holds instead) and keep the
// Platform-Tenant header their DLQ entry carries.
func (s *Service) storedSubject(dest string) string {
	if dest == "" || s.cfg.NamePrefix == "" || strings.HasPrefix(dest, s.cfg.NamePrefix) {
		return dest
	}
	return s.cfg.NamePrefix + dest
}

func storedIfDifferent(stored, name string) string {
	if stored == name {
		return ""
	}
	return stored
}

// KV keys.
func recKey(id string) string      { return "req." + id }
func selKey(id string) string      { return "sel." + id }
func lockKey(stream string) string { return "lock." + stream }

// MsgID is the Nats-Msg-Id of the event a redrive sends for a DLQ entry:
// the same on every retry of the run, so the destination stream drops a
// repeat within its duplicate window.
func MsgID(id string, dlqSeq uint64) string {
	return "redrive:" + id + ":" + strconv.FormatUint(dlqSeq, 10)
}

func newID() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return "rd-" + time.Now().UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b)
}

// encodeSeqs packs sorted sequences as uvarint (gap, run length) pairs.
func encodeSeqs(seqs []uint64) []byte {
	var out []byte
	var prev uint64
	for _, r := range toRanges(seqs) {
		out = binary.AppendUvarint(out, r[0]-prev)
		out = binary.AppendUvarint(out, r[1]-r[0])
		prev = r[1]
	}
	return out
}

func decodeSeqs(b []byte) ([]uint64, error) {
	var rs []seqRange
	var prev uint64
	for len(b) > 0 {
		gap, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, errors.New("redrive: corrupt selection")
		}
		b = b[n:]
		run, m := binary.Uvarint(b)
		if m <= 0 {
			return nil, errors.New("redrive: corrupt selection")
		}
		b = b[m:]
		start := prev + gap
		rs = append(rs, seqRange{start, start + run})
		prev = start + run
	}
	return fromRanges(rs)
}

// Submit freezes req's selection and stores the request. A topic marked
// review: required then needs another principal's approval; otherwise the
// requester may run it directly.
func (s *Service) Submit(ctx context.Context, req Request) (Status, error) {
	f, err := s.freeze(ctx, req)
	if err != nil {
		return Status{}, err
	}
	req.Destination = s.storedSubject(req.Destination)
	req.Scope = s.cfg.Tenant
	id := newID()
	groups := sortedGroups(f.groups)
	if len(groups) > 20 {
		groups = groups[:20]
	}
	r := &Redrive{
		ID: id, Request: req, State: StateRequested, Object: f.ref.Name, Kind: f.ref.Kind, DLQStream: f.ref.Stream,
		Tenant: s.cfg.Tenant, StoredObject: storedIfDifferent(f.ref.object, f.ref.Name),
		Owner: f.ref.Owner, ReviewRequired: f.ref.ReviewRequired, WatchDLQ: f.watch,
		Total: len(f.seqs), Excluded: f.excluded, Groups: groups, Created: time.Now().UTC(),
		ConsumerGroups: slices.Sorted(maps.Keys(f.cgroups)),
	}
	r.Steps = []Step{{Time: r.Created, Actor: req.Requester, To: StateRequested, Note: req.Reason}}
	sel := encodeSeqs(f.seqs)
	if len(sel) > 900_000 {
		return Status{}, fmt.Errorf("%w: the selection is too fragmented to store (%d bytes); narrow it", ErrInvalid, len(sel))
	}
	if _, err := s.kv.Create(ctx, selKey(id), sel); err != nil {
		return Status{}, fmt.Errorf("redrive: store selection: %w", err)
	}
	b, err := json.Marshal(r)
	if err != nil {
		return Status{}, err
	}
	rev, err := s.kv.Create(ctx, recKey(id), b)
	if err != nil {
		return Status{}, fmt.Errorf("redrive: store request: %w", err)
	}
	s.auditf(ctx, AuditRecord{Actor: req.Requester, Action: ActionRequest, Target: id, After: map[string]any{
		"dlq": r.Object, "selection": req.Selection, "total": r.Total, "first_seq": f.seqs[0], "last_seq": f.seqs[len(f.seqs)-1],
		"destination": req.Destination, "rate": req.Rate, "sample_size": req.SampleSize, "review_required": r.ReviewRequired,
		"groups": groups,
	}, Detail: req.Reason})
	return r.status(rev), nil
}

// auditf appends r, retrying briefly; a record that cannot be written is
// logged (the state change it describes has already happened).
func (s *Service) auditf(ctx context.Context, r AuditRecord) {
	if r.Tenant == "" {
		r.Tenant = s.cfg.Tenant
	}
	var err error
	for attempt := range 3 {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		err = s.audit.Append(actx, r)
		cancel()
		if err == nil {
			return
		}
		time.Sleep(time.Duration(attempt+1) * 100 * time.Millisecond)
	}
	s.log.Error("redrive: audit append failed", "action", r.Action, "request", r.Target, "err", err)
}

func (s *Service) get(ctx context.Context, id string) (*Redrive, jetstream.KeyValueEntry, error) {
	return readRecord[Redrive](ctx, s.kvGet, "redrive request", id, recKey)
}

// readRecord reads and decodes the record of id (key(id), read by read):
// a malformed id is ErrInvalid and a missing record ErrNotFound, each
// naming the record as noun.
func readRecord[T any](ctx context.Context, read func(ctx context.Context, key string) (jetstream.KeyValueEntry, error), noun, id string, key func(string) string) (*T, jetstream.KeyValueEntry, error) {
	if id == "" || strings.ContainsAny(id, " .*>") {
		return nil, nil, fmt.Errorf("%w: bad %s id %q", ErrInvalid, noun, id)
	}
	e, err := read(ctx, key(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil, fmt.Errorf("%w: no %s %s", ErrNotFound, noun, id)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("redrive: read %s %s: %w", noun, id, err)
	}
	var r T
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return nil, nil, fmt.Errorf("redrive: decode %s %s: %w", noun, id, err)
	}
	return &r, e, nil
}

// update applies fn to the record by compare-and-set on its revision,
// re-reading and re-applying fn when someone else wrote first: fn sees
// the latest state every time, so two callers racing for one transition
// cannot both make it.
func (s *Service) update(ctx context.Context, id string, fn func(r *Redrive) error) (*Redrive, uint64, error) {
	transientFails := 0
	for attempt := 0; ; attempt++ {
		r, e, err := s.get(ctx, id)
		if err != nil {
			return nil, 0, err
		}
		if err := fn(r); err != nil {
			return r, e.Revision(), err
		}
		b, err := json.Marshal(r)
		if err != nil {
			return nil, 0, err
		}
		rev, err := s.kv.Update(ctx, recKey(id), b, e.Revision())
		if err == nil {
			return r, rev, nil
		}
		// A transient failure may or may not have written: read again and
		// re-apply fn (a write that did land makes the revision move on).
		if ctx.Err() == nil && jserr.Transient(err) && transientFails < transientAttempts {
			retry.Sleep(ctx, time.Duration(100<<transientFails)*time.Millisecond)
			transientFails++
			continue
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) || attempt >= 50 {
			return nil, 0, fmt.Errorf("redrive: write %s: %w", id, err)
		}
	}
}

// Get returns a redrive's status.
func (s *Service) Get(ctx context.Context, id string) (Status, error) {
	r, e, err := s.get(ctx, id)
	if err != nil {
		return Status{}, err
	}
	return r.status(e.Revision()), nil
}

// ListFilter selects requests.
type ListFilter struct {
	// Scope is the tenant whose requests (control API only).
	Scope string `json:"scope,omitempty"`
	DLQ   string `json:"dlq,omitempty"`
	State State  `json:"state,omitempty"`
}

// List returns the requests matching f, newest first.
func (s *Service) List(ctx context.Context, f ListFilter) ([]Status, error) {
	out, err := loadStored(ctx, s, "req", func(id string) (Status, bool, error) {
		r, e, err := s.get(ctx, id)
		if err != nil {
			return Status{}, false, err
		}
		if (f.DLQ != "" && r.Object != f.DLQ && r.DLQStream != f.DLQ) || (f.State != "" && r.State != f.State) {
			return Status{}, false, nil
		}
		return r.status(e.Revision()), true, nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.After(out[j].Created) })
	return out, nil
}

// DryRun reports what running the stored request would send now: its
// frozen entries still in the DLQ, grouped by fingerprint.
func (s *Service) DryRun(ctx context.Context, id string) (Preview, error) {
	r, _, err := s.get(ctx, id)
	if err != nil {
		return Preview{}, err
	}
	seqs, err := s.selection(ctx, id)
	if err != nil {
		return Preview{}, err
	}
	left := seqs[min(r.Progress.Next, len(seqs)):]
	f := &frozen{ref: dlqRef{DLQ: DLQ{Name: r.Object, Kind: r.Kind, Stream: r.DLQStream, ReviewRequired: r.ReviewRequired}, object: r.object()},
		groups: map[string]*Group{}, dests: map[string]int{}, watch: r.WatchDLQ}
	gone := 0
	if len(left) > 0 {
		want := map[uint64]bool{}
		for _, q := range left {
			want[q] = true
		}
		err = scan(ctx, s.js, r.DLQStream, left[0], func(m *jetstream.RawStreamMsg) bool {
			if m.Sequence > left[len(left)-1] {
				return false
			}
			if !want[m.Sequence] {
				return true
			}
			e := toEntry(m, false)
			d := destination(r.Destination, r.object(), r.Kind, e)
			if d == "" {
				f.excluded++
				return true
			}
			f.seqs = append(f.seqs, e.Seq)
			f.dests[d]++
			addToGroup(f.groups, e)
			return true
		})
		if err != nil {
			return Preview{}, err
		}
		gone = len(left) - len(f.seqs) - f.excluded
	}
	p := f.preview(r.Request)
	p.ID, p.Gone = id, gone
	return p, nil
}

// kvGet reads key. The bucket's reads are the stream leader's
// (openBucket), so they see every write acknowledged before; a missing key
// is still asked for again briefly before that is believed (a leader just
// elected may not have applied the last writes yet).
func (s *Service) kvGet(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	e, err := s.kv.Get(ctx, key)
	for attempt := 0; ctx.Err() == nil; attempt++ {
		var wait time.Duration
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound) && attempt < 3:
			wait = time.Duration(25<<attempt) * time.Millisecond
		case jserr.Transient(err) && attempt < transientAttempts:
			wait = time.Duration(100<<attempt) * time.Millisecond
		default:
			return e, err
		}
		retry.Sleep(ctx, wait)
		e, err = s.kv.Get(ctx, key)
	}
	return e, err
}

// transientAttempts bounds the retries of a bucket read or write that
// failed transiently: 6, backing off from 100 ms, about 6 s in all, the
// time the bucket's stream takes to elect a leader after its node dies.
const transientAttempts = 6

func (s *Service) selection(ctx context.Context, id string) ([]uint64, error) {
	e, err := s.kvGet(ctx, selKey(id))
	if err != nil {
		return nil, fmt.Errorf("redrive: selection of %s: %w", id, err)
	}
	return decodeSeqs(e.Value())
}

// storedIDs returns the ids of the requests' bucket keys <prefix>.<id>.
func (s *Service) storedIDs(ctx context.Context, prefix string) ([]string, error) {
	keys, err := kvutil.Keys(ctx, s.kv, prefix+".*")
	if err != nil {
		return nil, fmt.Errorf("redrive: list %s keys: %w", prefix, err)
	}
	var ids []string
	for _, k := range keys {
		ids = append(ids, strings.TrimPrefix(k, prefix+"."))
	}
	return ids, nil
}

// loadStored returns load(id) of every id stored under prefix that load
// keeps (ok true), in key order, leaving out an id deleted since it was
// listed (load returns ErrNotFound); any other error ends the listing.
func loadStored[T any](ctx context.Context, s *Service, prefix string, load func(id string) (v T, ok bool, err error)) ([]T, error) {
	ids, err := s.storedIDs(ctx, prefix)
	if err != nil {
		return nil, err
	}
	out := []T{}
	for _, id := range ids {
		v, ok, err := load(id)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, v)
		}
	}
	return out, nil
}
