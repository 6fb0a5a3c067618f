package redrive

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/msgplatform/platform/internal/validate"
)

// Limits on requests.
const (
	// MaxSelection bounds the entries one request may redrive.
	MaxSelection = 200_000
	// MaxRate is the highest rate a request may ask for (events/s); 0
	// means unlimited.
	MaxRate = 100_000
	// DefaultSampleWindow is how long the outcome of the sample is
	// watched unless the request says otherwise. It should cover the
	// consumers' retry schedule (HarborCart: 2+4+8+16 s).
	DefaultSampleWindow = 45 * time.Second
)

// Selection says which entries of the DLQ a request redrives. Exactly one
// of a sequence range, a fingerprint or explicit sequences; it is
// resolved to an explicit list of DLQ sequences when the request is made
// (frozen), so entries that fail after the review are never swept in.
type Selection struct {
	// FromSeq..ToSeq (inclusive; ToSeq 0: up to the last entry present at
	// request time).
	FromSeq uint64 `json:"from_seq,omitempty"`
	ToSeq   uint64 `json:"to_seq,omitempty"`
	// Fingerprint selects every entry present with that error
	// fingerprint (see Fingerprint), optionally within FromSeq..ToSeq.
	Fingerprint string `json:"fingerprint,omitempty"`
	// Seqs are explicit DLQ sequences; each must be present.
	Seqs []uint64 `json:"seqs,omitempty"`
	// All selects every entry present at request time.
	All bool `json:"all,omitempty"`
}

// Request is a redrive as a requester asks for it.
type Request struct {
	// Scope is the tenant whose account holds the DLQ ("" the platform
	// admin account; see ScopeRequest).
	Scope string `json:"scope,omitempty"`
	// DLQ names the DLQ by its topic or queue (e.g. "orders").
	DLQ       string    `json:"dlq"`
	Selection Selection `json:"selection"`
	// Destination is the subject to publish to; "" means each entry's
	// original subject (for a topic: <topic>.<key>, so the event lands
	// on its key's partition again).
	Destination string `json:"destination,omitempty"`
	// Rate is events per second (0: unlimited).
	Rate float64 `json:"rate"`
	// SampleSize events are sent first; the rest only if at most
	// MaxFailureRate of them reached the DLQ again within SampleWindow.
	// 0: no sample (the failure rate is still watched during the run).
	SampleSize   int           `json:"sample_size"`
	SampleWindow time.Duration `json:"sample_window,omitempty"`
	// MaxFailureRate is the share of redriven events that may fail again
	// (0..1); the run pauses itself above it. 0: any failure pauses.
	MaxFailureRate float64 `json:"max_failure_rate,omitempty"`
	// Reason is why (required: it goes to the audit log).
	Reason string `json:"reason"`
	// Requester is the principal asking: user@tenant or user@platform
	// when authenticated (the web console's session; platformd from a
	// request signed with the user's .creds, see internal/principal),
	// else unauthenticated:<name> as an unsigned control request gave it.
	Requester string `json:"requester"`
	// Authenticated says Requester was authenticated. The server sets it
	// (platformd overwrites whatever a control request says); a review:
	// required redrive is approved only when it is true.
	Authenticated bool `json:"authenticated,omitempty"`
}

// Validate reports every problem with the request.
func (r Request) Validate() error {
	var p validate.Problems
	if r.DLQ == "" {
		p.Addf("dlq", "name the DLQ by its topic or queue, e.g. orders")
	}
	s := r.Selection
	kinds := 0
	if s.All {
		kinds++
	}
	if s.Fingerprint != "" {
		kinds++
	}
	if len(s.Seqs) > 0 {
		kinds++
	}
	if (s.FromSeq > 0 || s.ToSeq > 0) && s.Fingerprint == "" {
		kinds++
	}
	switch {
	case kinds == 0:
		p.Addf("selection", "choose entries: a sequence range (from/to), a fingerprint, explicit seqs, or all")
	case kinds > 1:
		p.Addf("selection", "choose one of: a sequence range, a fingerprint (optionally within a range), explicit seqs, all")
	}
	if s.ToSeq > 0 && s.FromSeq > s.ToSeq {
		p.Addf("selection.to_seq", "must be >= from_seq %d, got %d", s.FromSeq, s.ToSeq)
	}
	if len(s.Seqs) > MaxSelection {
		p.Addf("selection.seqs", "at most %d, got %d", MaxSelection, len(s.Seqs))
	}
	if slices.Contains(s.Seqs, 0) {
		p.Addf("selection.seqs", "sequences start at 1")
	}
	if s.Fingerprint != "" && len(s.Fingerprint) != 12 {
		p.Addf("selection.fingerprint", "is 12 hex digits as `dlq groups` prints it, got %q", s.Fingerprint)
	}
	if math.IsNaN(r.Rate) || r.Rate < 0 || r.Rate > MaxRate {
		p.Addf("rate", "must be 0 (unlimited) .. %d events/s, got %v", MaxRate, r.Rate)
	}
	if r.SampleSize < 0 {
		p.Addf("sample_size", "must be >= 0, got %d", r.SampleSize)
	}
	if r.SampleWindow < 0 || r.SampleWindow > time.Hour {
		p.Addf("sample_window", "must be 0 (default %s) .. 1h, got %s", DefaultSampleWindow, r.SampleWindow)
	}
	if math.IsNaN(r.MaxFailureRate) || r.MaxFailureRate < 0 || r.MaxFailureRate > 1 {
		p.Addf("max_failure_rate", "must be 0..1, got %v", r.MaxFailureRate)
	}
	if r.Reason == "" {
		p.Addf("reason", "say why (it is recorded in the audit log)")
	}
	if r.Requester == "" {
		p.Addf("requester", "name who asks")
	}
	if r.Destination != "" && !validSubject(r.Destination) {
		p.Addf("destination", "must be a literal subject (no wildcards or spaces), got %q", r.Destination)
	}
	return p.Err(ErrInvalid)
}

func validSubject(s string) bool {
	if s == "" || s[0] == '.' || s[len(s)-1] == '.' {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '*' || c == '>' || c == ' ' || c == '\t' || c == '\n' || c == '\r':
			return false
		case c == '.' && i > 0 && s[i-1] == '.':
			return false
		}
	}
	return true
}

// State is where a redrive is in its life.
type State string

// States. requested → approved | rejected | cancelled; approved →
// running | rejected | cancelled; requested → running directly when the
// topic needs no review; running → paused | completed | failed |
// cancelled; paused → running (resume) | cancelled.
const (
	StateRequested State = "requested"
	StateApproved  State = "approved"
	StateRejected  State = "rejected"
	StateRunning   State = "running"
	StatePaused    State = "paused"
	StateCompleted State = "completed"
	StateCancelled State = "cancelled"
	StateFailed    State = "failed"
)

// Terminal reports whether nothing can happen to the redrive any more.
func (s State) Terminal() bool {
	return s == StateRejected || s == StateCompleted || s == StateCancelled || s == StateFailed
}

// Phases of a run.
const (
	PhaseSample     = "sample"      // sending the sample
	PhaseSampleWait = "sample-wait" // watching the sample's outcome
	PhaseMain       = "main"        // sending the rest
	PhaseSettle     = "settle"      // everything sent; watching the outcome
	PhaseDone       = "done"
)

// Progress is a run's position and counts.
type Progress struct {
	Phase string `json:"phase,omitempty"`
	// Next is the index in the frozen selection of the next entry to
	// send: everything before it was sent (acknowledged) or skipped.
	Next     int `json:"next"`
	Sent     int `json:"sent"`
	Skipped  int `json:"skipped"`  // entries gone from the DLQ (expired, or deleted after an earlier send)
	Refailed int `json:"refailed"` // redriven events that reached a DLQ again
	// FirstRefailure is the reason of the first redriven event that failed
	// again.
	FirstRefailure string `json:"first_refailure,omitempty"`
	// WatchFrom is the first sequence of the watched DLQ that counts as a
	// re-failure (its last sequence + 1 when the first run started).
	WatchFrom  uint64 `json:"watch_from,omitempty"`
	SampleSent int    `json:"sample_sent,omitempty"`
	// WindowStart is when the current outcome window (sample-wait or
	// settle) began.
	WindowStart time.Time `json:"window_start,omitzero"`
	// BaseSent and BaseRefailed are the counts when the run was last
	// resumed: the failure rate is judged on what was sent since.
	BaseSent     int       `json:"base_sent,omitempty"`
	BaseRefailed int       `json:"base_refailed,omitempty"`
	StartedAt    time.Time `json:"started_at,omitzero"`
	UpdatedAt    time.Time `json:"updated_at,omitzero"`
	FinishedAt   time.Time `json:"finished_at,omitzero"`
	// Sending is the time spent sending: from the first entry read from
	// the DLQ (not the start of the runner, whose first reads may take a
	// second on a loaded cluster) to the last one acknowledged and
	// deleted, pauses excluded.
	Sending time.Duration `json:"sending"`
}

// Step is one state transition, who made it and why.
type Step struct {
	Time  time.Time `json:"time"`
	Actor string    `json:"actor"`
	From  State     `json:"from,omitempty"`
	To    State     `json:"to"`
	Note  string    `json:"note,omitempty"`
}

// Redrive is a request and everything that happened to it: the replicated
// record kept in the platform-redrive KV bucket.
type Redrive struct {
	ID string `json:"id"`
	Request
	State State `json:"state"`
	// Resolved at request time.
	Object string `json:"object"`
	// StoredObject is the object's name in its account when it differs
	// (a tenant's topic payments is stored as stored.payments).
	StoredObject string `json:"stored_object,omitempty"`
	// Tenant owns the DLQ ("" for the platform admin account).
	Tenant         string `json:"tenant,omitempty"`
	Kind           string `json:"kind,omitempty"`
	DLQStream      string `json:"dlq_stream"`
	Owner          string `json:"owner,omitempty"`
	ReviewRequired bool   `json:"review_required"`
	// WatchDLQ is the DLQ stream where re-failures of redriven events
	// land ("" when the destination has none: nothing to watch).
	WatchDLQ string `json:"watch_dlq,omitempty"`

	// ConsumerGroups are the groups (or queue consumers) that
	// dead-lettered the frozen entries: a caller who may consume some
	// groups only sees the request when it may consume all of these.
	ConsumerGroups []string `json:"consumer_groups,omitempty"`

	// Total entries frozen; Excluded entries matched but cannot be
	// redriven (no original subject: the payload was lost).
	Total    int       `json:"total"`
	Excluded int       `json:"excluded,omitempty"`
	Groups   []Group   `json:"groups,omitempty"` // the selection by fingerprint (top 20)
	Created  time.Time `json:"created"`
	// ApprovedBy is the approver (empty until approved).
	ApprovedBy string `json:"approved_by,omitempty"`
	// Runner is the service instance running it; Epoch counts claims (a
	// runner's writes are fenced by it).
	Runner   string   `json:"runner,omitempty"`
	Epoch    uint64   `json:"epoch,omitempty"`
	Progress Progress `json:"progress"`
	// PauseReason says why it paused (by a person or by the canary).
	PauseReason string `json:"pause_reason,omitempty"`
	Error       string `json:"error,omitempty"`
	Steps       []Step `json:"steps"`
}

// object is the name the DLQ's topic or queue has in its account.
func (r *Redrive) object() string {
	if r.StoredObject != "" {
		return r.StoredObject
	}
	return r.Object
}

// Status is a redrive with its rate and ETA.
type Status struct {
	Redrive
	// Rate is the achieved rate (events/s) while sending; ETA the time
	// to send the rest at the lower of the achieved and requested rates.
	Rate float64       `json:"achieved_rate"`
	ETA  time.Duration `json:"eta,omitempty"`
	// Revision is the KV revision of the record.
	Revision uint64 `json:"revision"`
}

func (r *Redrive) status(rev uint64) Status {
	st := Status{Redrive: *r, Revision: rev}
	p := r.Progress
	if p.Sending > 0 && p.Sent > 0 {
		st.Rate = float64(p.Sent) / p.Sending.Seconds()
	}
	left := r.Total - p.Next
	if left > 0 && !r.State.Terminal() {
		rate := st.Rate
		if r.Rate > 0 && (rate == 0 || rate > r.Rate) {
			rate = r.Rate
		}
		if rate > 0 {
			st.ETA = time.Duration(float64(left) / rate * float64(time.Second)).Round(time.Second)
		}
	}
	return st
}

func (r *Redrive) step(actor string, to State, note string) {
	r.Steps = append(r.Steps, Step{Time: time.Now().UTC(), Actor: actor, From: r.State, To: to, Note: note})
	r.State = to
}

// seqRange is an inclusive run of sequences, for a compact frozen
// selection.
type seqRange [2]uint64

func toRanges(seqs []uint64) []seqRange {
	var out []seqRange
	for _, s := range seqs {
		if n := len(out); n > 0 && out[n-1][1]+1 == s {
			out[n-1][1] = s
			continue
		}
		out = append(out, seqRange{s, s})
	}
	return out
}

func fromRanges(rs []seqRange) ([]uint64, error) {
	var out []uint64
	for _, r := range rs {
		if r[0] == 0 || r[1] < r[0] || r[1]-r[0] > MaxSelection {
			return nil, errors.New("redrive: corrupt selection range")
		}
		for s := r[0]; s <= r[1]; s++ {
			out = append(out, s)
		}
	}
	return out, nil
}

func errState(r *Redrive, verb string) error {
	return fmt.Errorf("%w: cannot %s redrive %s: it is %s", ErrConflict, verb, r.ID, r.State)
}
