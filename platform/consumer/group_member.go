package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/msgplatform/platform/internal/tick"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/dlq"
)

// GroupMembersBucket is the replicated KV bucket holding every group's
// members (heartbeats) and partition assignment.
const GroupMembersBucket = "platform_groups"

// ErrFenced: the member no longer owns the partition (it was reassigned,
// or the member could not renew its membership in time), so it must not
// ack, nak or dead-letter the event; the new owner will handle it.
var ErrFenced = errors.New("platform: fenced, partition owned by another member")

// MemberConfig configures a group Member.
type MemberConfig struct {
	Group string
	// ID names the member (default: a random id). Must be unique in the
	// group; letters, digits, '-' and '_'.
	ID string
	// Heartbeat is how often the member renews its membership (default
	// 1s); TTL is how long without renewal makes it dead (default 6s).
	Heartbeat, TTL time.Duration
	// Retry is the retry policy of handler errors.
	Retry RetryPolicy
	// MaxConcurrency bounds the handlers running at once in this member
	// (default 64); MaxBuffered the events held per partition (running,
	// waiting behind their key, or parked) (default 256).
	MaxConcurrency, MaxBuffered int
	// DrainTimeout bounds how long a released partition waits for its
	// running handlers (default 10s).
	DrainTimeout time.Duration
	Metrics      *Metrics
	Logger       *slog.Logger
	// NoDLQRouter: do not run a dlq.Router for the group's topic (run one
	// elsewhere, e.g. in the daemon).
	NoDLQRouter bool
	// Middleware wraps the handler, the first outermost, inside the
	// runtime's own steps (see Middleware).
	Middleware []Middleware
}

func (c *MemberConfig) ensureDefaults() {
	if c.ID == "" {
		c.ID = nuid.Next()
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = time.Second
	}
	if c.TTL <= 0 {
		c.TTL = 6 * c.Heartbeat
	}
	c.Retry = c.Retry.withDefaults()
	if c.MaxConcurrency <= 0 {
		c.MaxConcurrency = 64
	}
	if c.MaxBuffered <= 0 {
		c.MaxBuffered = 256
	}
	if c.DrainTimeout <= 0 {
		c.DrainTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// Member is one process's membership in a consumer group. Members of a
// group share its partitions: each partition has one owner at a time,
// spread evenly and moved only when orphaned or surplus (sticky).
type Member struct {
	js      jetstream.JetStream
	cfg     MemberConfig
	handler Handler
	topic   platform.TopicSpec
	kv      jetstream.KeyValue
	sem     chan struct{}
	budget  *budget
	log     *slog.Logger

	mu       sync.Mutex
	cache    map[string]jetstream.KeyValueEntry
	runners  map[int]*partitionRunner
	gen      uint64
	lastBeat time.Time // last successful heartbeat (local clock)

	router    *dlq.Router
	failures  *dlq.FirstFailures // dlq.FirstFailuresBucket
	paused    atomic.Bool        // test hook: stop heartbeating (a stalled process)
	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
	wake      chan struct{}
}

// NewMember returns a member of cfg.Group that runs handler for each
// event of the partitions it owns. Start joins the group.
func NewMember(js jetstream.JetStream, cfg MemberConfig, handler Handler) (*Member, error) {
	cfg.ensureDefaults()
	var errs []error
	if !platform.ValidGroupName(cfg.Group) {
		errs = append(errs, fmt.Errorf("group: must be a group name, got %q", cfg.Group))
	}
	if handler == nil {
		errs = append(errs, errors.New("handler: required"))
	}
	if cfg.TTL < 2*cfg.Heartbeat {
		errs = append(errs, fmt.Errorf("ttl: must be at least 2 heartbeats (%s), got %s", 2*cfg.Heartbeat, cfg.TTL))
	}
	if err := cfg.Retry.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := checkMiddleware(cfg.Middleware); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: member: %w", platform.ErrInvalidSpec, errors.Join(errs...))
	}
	return &Member{
		js: js, cfg: cfg, handler: handler, log: cfg.Logger.With("group", cfg.Group, "member", cfg.ID),
		sem: make(chan struct{}, cfg.MaxConcurrency), budget: newBudget(cfg.Retry.Budget),
		cache: map[string]jetstream.KeyValueEntry{}, runners: map[int]*partitionRunner{},
		done: make(chan struct{}), wake: make(chan struct{}, 1),
	}, nil
}

// ID returns the member's id.
func (m *Member) ID() string { return m.cfg.ID }

// Start finds the group's topic, registers the member and starts
// rebalancing in the background; it returns once the member is
// registered (it may own no partition yet).
func (m *Member) Start(ctx context.Context) error {
	topic, err := m.findTopic(ctx)
	if err != nil {
		return err
	}
	m.topic = topic
	m.kv, err = m.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: GroupMembersBucket, Description: "platform consumer group membership", History: 1,
		Replicas: min(topic.Replicas, 3), Storage: jetstream.FileStorage,
	})
	if err != nil {
		return fmt.Errorf("platform: group %s: membership bucket: %w", m.cfg.Group, err)
	}
	w, err := m.kv.Watch(context.Background(), m.cfg.Group+".>")
	if err != nil {
		return fmt.Errorf("platform: group %s: watch membership: %w", m.cfg.Group, err)
	}
	// The first beat is tried again until ctx ends: one put may take
	// longer than a heartbeat on a busy bucket leader (the heartbeat loop
	// tolerates that; Start must too).
	for {
		err := m.beat(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			_ = w.Stop()
			return fmt.Errorf("platform: group %s: join (membership record): %w", m.cfg.Group, err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(m.cfg.Heartbeat / 2):
		}
	}
	m.failures = dlq.NewFirstFailures(m.js, topic.Replicas)
	if !m.cfg.NoDLQRouter {
		m.router = dlq.NewRouter(m.js, []string{topic.Name}, m.log)
		if err := m.router.Start(ctx); err != nil {
			_ = w.Stop()
			return err
		}
	}
	rctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	go m.watch(rctx, w)
	go m.loop(rctx)
	if m.cfg.Metrics != nil {
		m.cfg.Metrics.addMember(m)
	}
	m.poke()
	return nil
}

func (m *Member) findTopic(ctx context.Context) (platform.TopicSpec, error) {
	var streams []string
	l := m.js.StreamNames(ctx)
	for n := range l.Name() {
		streams = append(streams, n)
	}
	if err := l.Err(); err != nil {
		return platform.TopicSpec{}, fmt.Errorf("platform: group %s: list streams: %w", m.cfg.Group, err)
	}
	for _, s := range streams {
		c, err := m.js.Consumer(ctx, s, platform.PartitionConsumer(m.cfg.Group, 0))
		if err != nil {
			continue
		}
		if c.CachedInfo().Config.Metadata[platform.MetaGroup] != m.cfg.Group {
			continue
		}
		st, err := m.js.Stream(ctx, s)
		if err != nil {
			return platform.TopicSpec{}, fmt.Errorf("platform: group %s: %w", m.cfg.Group, err)
		}
		return platform.TopicFromStream(&st.CachedInfo().Config)
	}
	return platform.TopicSpec{}, fmt.Errorf("%w: group %q (apply it first)", platform.ErrNotFound, m.cfg.Group)
}

func (m *Member) watch(ctx context.Context, w jetstream.KeyWatcher) {
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil {
				continue
			}
			m.mu.Lock()
			if e.Operation() == jetstream.KeyValuePut {
				m.cache[e.Key()] = e
			} else {
				delete(m.cache, e.Key())
			}
			m.mu.Unlock()
			m.poke()
		}
	}
}

func (m *Member) poke() { tick.Signal(m.wake) }

func (m *Member) loop(ctx context.Context) {
	defer close(m.done)
	tick.Repeat(ctx, m.cfg.Heartbeat, m.wake, func(ticked bool) bool {
		if ticked && !m.paused.Load() {
			if err := m.beat(ctx); err != nil {
				m.log.Warn("platform: heartbeat failed", "err", err)
			}
		}
		m.rebalance(ctx)
		return true
	})
}

func (m *Member) memberKey(id string) string { return m.cfg.Group + ".member." + id }
func (m *Member) assignmentKey() string      { return m.cfg.Group + ".assignment" }

// beat publishes the member's record.
func (m *Member) beat(ctx context.Context) error {
	m.mu.Lock()
	rec := memberRecord{ID: m.cfg.ID, Gen: m.gen}
	for p := range m.runners {
		rec.Holds = append(rec.Holds, p)
	}
	m.mu.Unlock()
	slices.Sort(rec.Holds)
	b, _ := json.Marshal(rec)
	actx, cancel := context.WithTimeout(ctx, m.cfg.Heartbeat)
	defer cancel()
	start := time.Now()
	if _, err := m.kv.Put(actx, m.memberKey(m.cfg.ID), b); err != nil {
		return err
	}
	m.mu.Lock()
	m.lastBeat = start
	m.mu.Unlock()
	return nil
}

// leaseValid reports whether the member renewed its membership recently
// enough that no other member can have taken its partitions.
func (m *Member) leaseValid() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return time.Since(m.lastBeat) < m.cfg.TTL-m.cfg.Heartbeat
}

// view reads the live members (by the broker's timestamps: a member is
// dead once its record is TTL older than the newest record) and the
// current assignment from the watched cache.
func (m *Member) view() (live []string, holds map[string][]int, cur *groupAssignment, rev uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var newest time.Time
	for _, e := range m.cache {
		if e.Created().After(newest) {
			newest = e.Created()
		}
	}
	holds = map[string][]int{}
	prefix := m.cfg.Group + ".member."
	for k, e := range m.cache {
		if len(k) <= len(prefix) || k[:len(prefix)] != prefix || newest.Sub(e.Created()) > m.cfg.TTL {
			continue
		}
		var r memberRecord
		if json.Unmarshal(e.Value(), &r) != nil {
			continue
		}
		live = append(live, r.ID)
		holds[r.ID] = r.Holds
	}
	slices.Sort(live)
	if e := m.cache[m.assignmentKey()]; e != nil {
		var a groupAssignment
		if json.Unmarshal(e.Value(), &a) == nil {
			cur, rev = &a, e.Revision()
		}
	}
	return live, holds, cur, rev
}

// rebalance writes a new assignment if this member is the lowest live
// one and the assignment is stale, then starts and stops partitions to
// match the current one.
func (m *Member) rebalance(ctx context.Context) {
	live, holds, cur, rev := m.view()
	if len(live) > 0 && live[0] == m.cfg.ID && !m.paused.Load() {
		var prev []string
		if cur != nil {
			prev = cur.Owners
		}
		want := assign(m.topic.Partitions, live, prev)
		if cur == nil || !slices.Equal(cur.Owners, want) || !slices.Equal(cur.Members, live) {
			b, _ := json.Marshal(groupAssignment{Members: live, Owners: want})
			actx, cancel := context.WithTimeout(ctx, m.cfg.Heartbeat)
			var err error
			if cur == nil {
				_, err = m.kv.Create(actx, m.assignmentKey(), b)
			} else {
				_, err = m.kv.Update(actx, m.assignmentKey(), b, rev)
			}
			cancel()
			if err == nil {
				m.cfg.Metrics.rebalanced(m.cfg.Group)
			}
			return // act on the new assignment when the watch delivers it
		}
	}
	if cur == nil {
		return
	}
	mine := cur.ownedBy(m.cfg.ID)
	m.mu.Lock()
	m.gen = rev
	var stop []*partitionRunner
	for p, r := range m.runners {
		if !slices.Contains(mine, p) {
			stop = append(stop, r)
			delete(m.runners, p)
		}
	}
	m.mu.Unlock()
	changed := len(stop) > 0
	releaseAll(stop, m.cfg.DrainTimeout)
	for _, p := range mine {
		m.mu.Lock()
		_, running := m.runners[p]
		m.mu.Unlock()
		if running || heldByOther(holds, m.cfg.ID, p) || !m.leaseValid() {
			continue
		}
		r, err := m.acquire(ctx, p, rev)
		if err != nil {
			m.log.Warn("platform: acquire partition", "partition", p, "err", err)
			continue
		}
		m.mu.Lock()
		m.runners[p] = r
		m.mu.Unlock()
		changed = true
	}
	if changed && !m.paused.Load() {
		_ = m.beat(ctx) // tell the others at once what this member holds
	}
}

func heldByOther(holds map[string][]int, self string, p int) bool {
	for id, hs := range holds {
		if id != self && slices.Contains(hs, p) {
			return true
		}
	}
	return false
}

// acquire takes over partition p at generation gen: it unpins the
// previous owner's client (its pulls get nothing from now on) and resets
// the consumer to its ack floor, so every event not acknowledged (held by
// the previous owner, parked, or in flight when it died) is delivered
// again, in stream order, before anything newer.
func (m *Member) acquire(ctx context.Context, p int, gen uint64) (*partitionRunner, error) {
	stream, name := platform.StreamName(m.topic.Name), platform.PartitionConsumer(m.cfg.Group, p)
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := m.js.Stream(actx, stream)
	if err != nil {
		return nil, err
	}
	if err := s.UnpinConsumer(actx, name, m.cfg.Group); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		m.log.Debug("platform: unpin", "partition", p, "err", err)
	}
	if _, err := m.js.ResetConsumer(actx, stream, name); err != nil {
		return nil, fmt.Errorf("reset %s: %w", name, err)
	}
	c, err := m.js.Consumer(actx, stream, name)
	if err != nil {
		return nil, err
	}
	r := newPartitionRunner(m, p, gen, c)
	go r.run()
	m.log.Info("platform: acquired partition", "partition", p, "fence", gen)
	return r, nil
}

// Partitions returns the partitions this member consumes now.
func (m *Member) Partitions() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []int
	for p := range m.runners {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// Generation returns the assignment generation the member acts on.
func (m *Member) Generation() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gen
}

// Close leaves the group: it stops every partition (running handlers may
// finish within DrainTimeout and ctx), then removes the member's record so
// the others take its partitions over without waiting for the TTL.
// Idempotent.
func (m *Member) Close(ctx context.Context) error {
	var err error
	m.closeOnce.Do(func() {
		if m.cancel == nil {
			return
		}
		runners := m.halt()
		drain := m.cfg.DrainTimeout
		if d, ok := ctx.Deadline(); ok {
			drain = min(drain, time.Until(d))
		}
		releaseAll(slices.Collect(maps.Values(runners)), drain)
		err = m.kv.Delete(ctx, m.memberKey(m.cfg.ID))
		m.detach(ctx)
	})
	return err
}

// crash stops the member as a crash would: no drain, no ack, no leave.
func (m *Member) crash() {
	m.closeOnce.Do(func() {
		for _, r := range m.halt() {
			r.abandon()
		}
		m.detach(context.Background())
	})
}

// halt stops the member's loop and takes its partition runners over.
func (m *Member) halt() map[int]*partitionRunner {
	m.cancel()
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	runners := m.runners
	m.runners = map[int]*partitionRunner{}
	return runners
}

// detach closes the member's DLQ router (within ctx) and removes the
// member from Metrics.
func (m *Member) detach(ctx context.Context) {
	if m.router != nil {
		_ = m.router.Close(ctx)
	}
	if m.cfg.Metrics != nil {
		m.cfg.Metrics.removeMember(m)
	}
}
