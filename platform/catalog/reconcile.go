package catalog

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/validate"
	"github.com/msgplatform/platform/platform"
)

// ReconcilerOptions configures a Reconciler. The zero value is usable.
type ReconcilerOptions struct {
	// DefaultReplicas is used for topic and queue specs with Replicas 0
	// (0 here means platform.DefaultReplicas, 3).
	DefaultReplicas int
	// Logger receives retries and applied changes (nil: discard).
	Logger *slog.Logger
	// RetryFor bounds how long one JetStream call is retried on transient
	// errors (timeouts, no responders, leader elections, offline peers);
	// the ctx passed to Apply bounds it too. Default 30s.
	RetryFor time.Duration
	// AttemptTimeout bounds one JetStream API request. Default 5s.
	AttemptTimeout time.Duration
}

// Reconciler applies declared topics, queues and groups to JetStream. It
// is safe for concurrent use, but two Apply calls touching the same object
// race like any two writers: run one reconciler per catalog.
type Reconciler struct {
	js   jetstream.JetStream
	opts ReconcilerOptions
	log  *slog.Logger
}

// NewReconciler returns a Reconciler working through js.
func NewReconciler(js jetstream.JetStream, opts ReconcilerOptions) *Reconciler {
	if opts.DefaultReplicas == 0 {
		opts.DefaultReplicas = platform.DefaultReplicas
	}
	if opts.RetryFor <= 0 {
		opts.RetryFor = 30 * time.Second
	}
	if opts.AttemptTimeout <= 0 {
		opts.AttemptTimeout = 5 * time.Second
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Reconciler{js: js, opts: opts, log: log}
}

// ApplyOptions changes what Apply may do.
type ApplyOptions struct {
	// AllowReducedReplicas permits lowering an existing topic's or queue's
	// replicas below 3 (flag --allow-reduced-replicas, config
	// allow_reduced_replicas: true). Without it such a change is an
	// platform.ErrConflict: fewer copies survive fewer node losses.
	AllowReducedReplicas bool `json:"allow_reduced_replicas,omitempty"`
	// AllowCleanupChange permits switching an existing topic between
	// cleanup delete and compact (flag --allow-cleanup-change, config
	// allow_cleanup_change: true). Without it such a change is an
	// platform.ErrConflict: it changes what history the topic keeps.
	AllowCleanupChange bool `json:"allow_cleanup_change,omitempty"`
	// DryRun plans and checks every change but applies none.
	DryRun bool `json:"dry_run,omitempty"`
}

// Kind is the kind of a declared object.
type Kind string

// Object kinds.
const (
	KindTopic Kind = "topic"
	KindQueue Kind = "queue"
	KindGroup Kind = "group"
)

// Action is what Apply did (or, with DryRun, would do) to an object.
type Action string

// Actions.
const (
	ActionCreate    Action = "create"
	ActionUpdate    Action = "update"
	ActionUnchanged Action = "unchanged"
)

// Change is the outcome of applying one object.
type Change struct {
	Kind   Kind   `json:"kind"`
	Name   string `json:"name"`
	Action Action `json:"action"`
	// Details are human-readable diff lines keyed like the configuration,
	// e.g. "retention.max_age: 72h0m0s -> 24h0m0s".
	Details []string `json:"details,omitempty"`
}

func (c Change) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: %s", c.Kind, c.Name, c.Action)
	for _, d := range c.Details {
		b.WriteString("\n  ")
		b.WriteString(d)
	}
	return b.String()
}

// Apply makes JetStream match the catalog: it creates or updates every
// topic, queue and group in it (objects not in the catalog are left
// alone). It validates the whole catalog, then reads the current state of
// every object and checks every change; if any is invalid
// (platform.ErrInvalidSpec), conflicting (platform.ErrConflict) or refers
// to something missing (platform.ErrNotFound), it applies nothing and the
// error names each problem by its configuration key. Otherwise it applies topics, then
// queues, then groups, retrying transient JetStream errors, and returns one
// Change per object in that order. If applying fails part-way (e.g. the
// cluster lost its quorum), the error says which object failed and the
// changes returned are those applied; Apply is idempotent, so running it
// again finishes the job.
func (r *Reconciler) Apply(ctx context.Context, c platform.Catalog, o ApplyOptions) ([]Change, error) {
	c = r.withDefaults(c)
	if err := c.Validate(); err != nil {
		return nil, err
	}
	p := r.newPlan(o)
	for _, name := range slices.Sorted(maps.Keys(c.Topics)) {
		p.planTopic(ctx, c.Topics[name])
	}
	for _, name := range slices.Sorted(maps.Keys(c.Queues)) {
		p.planQueue(ctx, c.Queues[name])
	}
	for _, name := range slices.Sorted(maps.Keys(c.Groups)) {
		g := c.Groups[name]
		t := c.Topics[g.Topic]
		p.planGroup(ctx, g, &t)
	}
	return p.run(ctx)
}

// ApplyTopic applies one topic (see Apply).
func (r *Reconciler) ApplyTopic(ctx context.Context, spec platform.TopicSpec, o ApplyOptions) (Change, error) {
	if spec.Replicas == 0 {
		spec.Replicas = r.opts.DefaultReplicas
	}
	return r.applyOne(ctx, "topics."+spec.Name, spec.Validate(), o, func(p *plan) { p.planTopic(ctx, spec) })
}

// ApplyQueue applies one queue (see Apply).
func (r *Reconciler) ApplyQueue(ctx context.Context, spec platform.QueueSpec, o ApplyOptions) (Change, error) {
	if spec.Replicas == 0 {
		spec.Replicas = r.opts.DefaultReplicas
	}
	return r.applyOne(ctx, "queues."+spec.Name, spec.Validate(), o, func(p *plan) { p.planQueue(ctx, spec) })
}

// ApplyGroup applies one group (see Apply). Its topic must exist
// (platform.ErrNotFound otherwise).
func (r *Reconciler) ApplyGroup(ctx context.Context, spec platform.GroupSpec, o ApplyOptions) (Change, error) {
	return r.applyOne(ctx, "groups."+spec.Name, spec.Validate(), o, func(p *plan) { p.planGroup(ctx, spec, nil) })
}

// applyOne applies the one object add plans, refusing it with its spec's
// problems (keyed under key) before anything is read.
func (r *Reconciler) applyOne(ctx context.Context, key string, problems error, o ApplyOptions, add func(*plan)) (Change, error) {
	if err := prefixed(key, problems); err != nil {
		return Change{}, err
	}
	p := r.newPlan(o)
	add(p)
	return one(p.run(ctx))
}

func one(changes []Change, err error) (Change, error) {
	if len(changes) == 0 {
		return Change{}, err
	}
	return changes[0], err
}

// prefixed re-keys the problems of a spec's Validate under key (e.g.
// "topics.orders"), as platform.Catalog.Validate keys them.
func prefixed(key string, err error) error {
	var out validate.Problems
	out.Merge(key, err)
	return out.Err(platform.ErrInvalidSpec)
}

// Retry runs op as the reconciler runs its own JetStream requests: each
// attempt bounded by ReconcilerOptions.AttemptTimeout, transient errors
// retried with jittered backoff until RetryFor has passed or ctx ends,
// any other error returned at once, wrapped with what.
func (r *Reconciler) Retry(ctx context.Context, what string, op func(ctx context.Context) error) error {
	return r.do(ctx, what, op)
}

// withDefaults returns a copy of c with Replicas 0 replaced by the
// default.
func (r *Reconciler) withDefaults(c platform.Catalog) platform.Catalog {
	out := platform.Catalog{Topics: map[string]platform.TopicSpec{}, Queues: map[string]platform.QueueSpec{}, Groups: map[string]platform.GroupSpec{}}
	for k, t := range c.Topics {
		if t.Replicas == 0 {
			t.Replicas = r.opts.DefaultReplicas
		}
		out.Topics[k] = t
	}
	for k, q := range c.Queues {
		if q.Replicas == 0 {
			q.Replicas = r.opts.DefaultReplicas
		}
		out.Queues[k] = q
	}
	for k, g := range c.Groups {
		out.Groups[k] = g
	}
	return out
}
