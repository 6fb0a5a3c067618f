package schema

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/jserr"
	"github.com/msgplatform/platform/internal/kvutil"
	"github.com/msgplatform/platform/platform"
)

// DefaultBucket is the KV bucket, in the PLATFORM account, holding the
// registry: one entry per subject with its mode and every version.
const DefaultBucket = "platform-schemas"

// Config configures a Registry.
type Config struct {
	// Bucket is the KV bucket (default platform-schemas).
	Bucket string
	// Replicas of the bucket: 3 on a 3-node fabric (default 1).
	Replicas int
	// Retries bounds how often a registration that lost the race for the
	// next version is re-checked and retried (default 10).
	Retries int
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config { return Config{Bucket: DefaultBucket, Replicas: 1, Retries: 10} }

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if c.Bucket == "" {
		errs = append(errs, fmt.Errorf("%w: bucket: must be set", ErrInvalid))
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		errs = append(errs, fmt.Errorf("%w: replicas: must be 1..5, got %d", ErrInvalid, c.Replicas))
	}
	if c.Retries < 0 {
		errs = append(errs, fmt.Errorf("%w: retries: must be >= 0, got %d", ErrInvalid, c.Retries))
	}
	return errors.Join(errs...)
}

// Registry stores schema versions per subject in a replicated KV bucket.
// A registration is a compare-and-set on the subject's entry, so two
// concurrent registrations cannot both become version n: the loser
// re-reads, is re-checked against the winner, and becomes n+1 or is
// refused.
type Registry struct {
	js  jetstream.JetStream
	cfg Config

	mu sync.Mutex
	kv jetstream.KeyValue
}

// New returns a Registry over js. The bucket is created on first use.
func New(js jetstream.JetStream, cfg Config) (*Registry, error) {
	if cfg.Bucket == "" {
		cfg.Bucket = DefaultBucket
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	if cfg.Retries == 0 {
		cfg.Retries = 10
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Registry{js: js, cfg: cfg}, nil
}

// bucket binds (creating if needed) the registry bucket. Reads are served
// by the stream leader (no direct get), so a read-modify-CAS sees the
// last write.
func (r *Registry) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.kv != nil {
		return r.kv, nil
	}
	kv, err := kvutil.Open(ctx, r.js, jetstream.KeyValueConfig{
		Bucket:      r.cfg.Bucket,
		Description: "platform schema registry: JSON Schema versions and compatibility mode per event type",
		History:     8,
		Replicas:    r.cfg.Replicas,
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("schema: registry bucket %s: %w", r.cfg.Bucket, err)
	}
	if kv, err = platform.LeaderReads(ctx, r.js, kv); err != nil {
		return nil, fmt.Errorf("schema: registry bucket %s: %w", r.cfg.Bucket, err)
	}
	r.kv = kv
	return kv, nil
}

// load reads a subject and the revision to CAS against (0: absent).
func (r *Registry) load(ctx context.Context, subject string) (*Subject, uint64, error) {
	kv, err := r.bucket(ctx)
	if err != nil {
		return nil, 0, err
	}
	e, err := kv.Get(ctx, subject)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return &Subject{Subject: subject, Mode: DefaultMode}, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("schema: read %s: %w", subject, err)
	}
	var s Subject
	if err := json.Unmarshal(e.Value(), &s); err != nil {
		return nil, 0, fmt.Errorf("schema: stored %s is corrupt: %w", subject, err)
	}
	return &s, e.Revision(), nil
}

// store writes s if the subject is still at rev; false if it moved.
func (r *Registry) store(ctx context.Context, s *Subject, rev uint64) (bool, error) {
	kv, err := r.bucket(ctx)
	if err != nil {
		return false, err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return false, err
	}
	if rev == 0 {
		_, err = kv.Create(ctx, s.Subject, b)
	} else {
		_, err = kv.Update(ctx, s.Subject, b, rev)
	}
	// Lost the race: Create finds the key, Update a newer revision.
	if jserr.WrongRevision(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("schema: write %s: %w", s.Subject, err)
	}
	return true, nil
}

// RegisterOptions change a registration.
type RegisterOptions struct {
	// Mode, if set, becomes the subject's mode in the same write, and the
	// schema is checked under it.
	Mode Mode `json:"mode,omitempty"`
}

// Registered is the outcome of Register.
type Registered struct {
	Version
	// Existing: the schema was already registered (as Version); nothing
	// was written.
	Existing bool `json:"existing,omitempty"`
	// CheckedAgainst lists the versions the compatibility check ran on.
	CheckedAgainst []int `json:"checked_against,omitempty"`
}

// Register adds schema as the next version of subject if it is compatible
// under the subject's mode. A schema equal (canonically) to a registered
// version returns that version. An incompatible schema returns an
// *IncompatibleError naming every rule it breaks.
func (r *Registry) Register(ctx context.Context, subject string, text []byte, opts RegisterOptions) (Registered, error) {
	if err := ValidateSubject(subject); err != nil {
		return Registered{}, err
	}
	if opts.Mode != "" {
		if err := opts.Mode.Validate(); err != nil {
			return Registered{}, err
		}
	}
	canon, doc, fp, err := canonical(text)
	if err != nil {
		return Registered{}, fmt.Errorf("%s: %w", subject, err)
	}
	for attempt := 0; ; attempt++ {
		s, rev, err := r.load(ctx, subject)
		if err != nil {
			return Registered{}, err
		}
		modeChanged := opts.Mode != "" && opts.Mode != s.Mode
		if opts.Mode != "" {
			s.Mode = opts.Mode
		}
		var (
			v        Version
			existing bool
			checked  []int
		)
		for _, old := range s.Versions {
			if old.Fingerprint == fp {
				v, existing = old, true
			}
		}
		if existing && !modeChanged {
			return Registered{Version: v, Existing: true}, nil
		}
		if !existing {
			next := len(s.Versions) + 1
			violations, against, err := compatibility(s.Mode, next, doc, s.Versions)
			if err != nil {
				return Registered{}, err
			}
			if len(violations) > 0 {
				return Registered{}, &IncompatibleError{Subject: subject, Version: next, Mode: s.Mode, Violations: violations}
			}
			checked = against
			v = Version{Subject: subject, Version: next, Schema: canon, Fingerprint: fp, Mode: s.Mode, Registered: time.Now().UTC()}
			s.Versions = append(s.Versions, v)
		}
		ok, err := r.store(ctx, s, rev)
		if err != nil {
			return Registered{}, err
		}
		if ok {
			return Registered{Version: v, Existing: existing, CheckedAgainst: checked}, nil
		}
		if attempt >= r.cfg.Retries || ctx.Err() != nil {
			return Registered{}, fmt.Errorf("%w: %s changed under %d attempts to register; retry", ErrConflict, subject, attempt+1)
		}
		backoff(ctx, attempt)
	}
}

// CheckResult is the outcome of Check.
type CheckResult struct {
	Subject        string      `json:"subject"`
	Mode           Mode        `json:"mode"`
	Compatible     bool        `json:"compatible"`
	Version        int         `json:"version"` // the version it would become
	Existing       int         `json:"existing,omitempty"`
	CheckedAgainst []int       `json:"checked_against,omitempty"`
	Violations     []Violation `json:"violations,omitempty"`
}

// Check reports whether schema could be registered under subject now
// (mode: the subject's, unless set), without writing anything.
func (r *Registry) Check(ctx context.Context, subject string, text []byte, mode Mode) (CheckResult, error) {
	if err := ValidateSubject(subject); err != nil {
		return CheckResult{}, err
	}
	if mode != "" {
		if err := mode.Validate(); err != nil {
			return CheckResult{}, err
		}
	}
	_, doc, fp, err := canonical(text)
	if err != nil {
		return CheckResult{}, fmt.Errorf("%s: %w", subject, err)
	}
	s, _, err := r.load(ctx, subject)
	if err != nil {
		return CheckResult{}, err
	}
	if mode == "" {
		mode = s.Mode
	}
	res := CheckResult{Subject: subject, Mode: mode, Version: len(s.Versions) + 1}
	for _, v := range s.Versions {
		if v.Fingerprint == fp {
			res.Existing = v.Version
		}
	}
	res.Violations, res.CheckedAgainst, err = compatibility(mode, res.Version, doc, s.Versions)
	res.Compatible = len(res.Violations) == 0
	return res, err
}

// SetMode sets a subject's compatibility mode (creating the subject with
// no versions if needed). It applies to the next registration.
func (r *Registry) SetMode(ctx context.Context, subject string, mode Mode) (SubjectInfo, error) {
	if err := ValidateSubject(subject); err != nil {
		return SubjectInfo{}, err
	}
	if err := mode.Validate(); err != nil {
		return SubjectInfo{}, err
	}
	for attempt := 0; ; attempt++ {
		s, rev, err := r.load(ctx, subject)
		if err != nil {
			return SubjectInfo{}, err
		}
		if s.Mode == mode && rev != 0 {
			return info(s), nil
		}
		s.Mode = mode
		ok, err := r.store(ctx, s, rev)
		if err != nil {
			return SubjectInfo{}, err
		}
		if ok {
			return info(s), nil
		}
		if attempt >= r.cfg.Retries {
			return SubjectInfo{}, fmt.Errorf("%w: %s changed under %d attempts to set its mode; retry", ErrConflict, subject, attempt+1)
		}
		backoff(ctx, attempt)
	}
}

// Subject returns a subject with every version.
func (r *Registry) Subject(ctx context.Context, subject string) (Subject, error) {
	if err := ValidateSubject(subject); err != nil {
		return Subject{}, err
	}
	s, rev, err := r.load(ctx, subject)
	if err != nil {
		return Subject{}, err
	}
	if rev == 0 {
		return Subject{}, fmt.Errorf("%w: no subject %q (platformctl schema list shows them)", ErrNotFound, subject)
	}
	return *s, nil
}

// Get returns one version of a subject (version 0: the latest).
func (r *Registry) Get(ctx context.Context, subject string, version int) (Version, error) {
	s, err := r.Subject(ctx, subject)
	if err != nil {
		return Version{}, err
	}
	if len(s.Versions) == 0 {
		return Version{}, fmt.Errorf("%w: %s has a mode (%s) but no schema version yet", ErrNotFound, subject, s.Mode)
	}
	if version == 0 {
		version = len(s.Versions)
	}
	if version < 1 || version > len(s.Versions) {
		return Version{}, fmt.Errorf("%w: %s has versions 1..%d, not %d", ErrNotFound, subject, len(s.Versions), version)
	}
	return s.Versions[version-1], nil
}

// List returns every subject, by name.
func (r *Registry) List(ctx context.Context) ([]SubjectInfo, error) {
	kv, err := r.bucket(ctx)
	if err != nil {
		return nil, err
	}
	names, err := kvutil.Keys(ctx, kv, ">")
	if err != nil {
		return nil, fmt.Errorf("schema: list: %w", err)
	}
	out := []SubjectInfo{}
	for _, n := range names {
		s, rev, err := r.load(ctx, n)
		if err != nil {
			return nil, err
		}
		if rev != 0 {
			out = append(out, info(s))
		}
	}
	return out, nil
}

// backoff waits a little, growing and jittered, after a lost race so
// racing registrations spread out instead of colliding again.
func backoff(ctx context.Context, attempt int) {
	d := time.Duration(1+rand.IntN(5*(min(attempt, 10)+1))) * time.Millisecond
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func info(s *Subject) SubjectInfo {
	return SubjectInfo{Subject: s.Subject, Mode: s.Mode, Latest: len(s.Versions), Versions: len(s.Versions)}
}
