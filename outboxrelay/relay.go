package outboxrelay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/jserr"
	"github.com/msgplatform/platform/internal/kvlease"
	"github.com/msgplatform/platform/internal/kvutil"
	"github.com/msgplatform/platform/internal/retry"
)

// Relay publishes an outbox's unsent events to their topics and marks them
// sent. Many relays may run against one outbox: the one holding the lease
// publishes, the others stand by.
type Relay struct {
	cfg   Config
	store Store
	js    jetstream.JetStream
	nc    *nats.Conn
	log   *slog.Logger
	m     *metrics
	pub   *publisher
	batch *batcher

	mu      sync.Mutex
	started bool
	closed  bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	fatal   chan error
	done    chan struct{}
	lease   *kvlease.Lease
	killed  bool
	ready   chan struct{}
	// acquired wakes the publish loop when the lease is acquired.
	acquired chan struct{}
}

// New returns a relay for store publishing on nc. It does not touch the
// broker: Start does, and keeps retrying while the broker is unavailable.
func New(cfg Config, store Store, nc *nats.Conn) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if store == nil || nc == nil {
		return nil, fmt.Errorf("%w: store and connection are required", ErrInvalidConfig)
	}
	pub := newPublisher(cfg.AckTimeout)
	js, err := jetstream.New(nc, append(pub.options(),
		jetstream.WithPublishAsyncMaxPending(cfg.MaxInFlight*2),
		jetstream.WithPublishAsyncTimeout(cfg.AckTimeout))...)
	if err != nil {
		return nil, fmt.Errorf("outboxrelay: jetstream: %w", err)
	}
	m, err := newMetrics(cfg.Name, cfg.Registerer)
	if err != nil {
		return nil, fmt.Errorf("outboxrelay: register metrics: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	r := &Relay{
		cfg: cfg, store: store, js: js, nc: nc, m: m, pub: pub,
		log:   log.With("outbox", cfg.Name, "holder", cfg.Holder),
		fatal: make(chan error, 1), done: make(chan struct{}), ready: make(chan struct{}),
		acquired: make(chan struct{}, 1),
	}
	r.batch = newBatcher(r)
	return r, nil
}

// Start launches the relay's loops (lease, publish, prune, stats) and
// returns. The relay stands by until it holds the lease; while the broker
// is unavailable it retries with backoff on its own.
func (r *Relay) Start(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	if r.started {
		return nil
	}
	r.started = true
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.cancel = cancel
	leaseReady := r.ready
	r.wg.Add(4)
	go func() { defer r.wg.Done(); r.leaseLoop(lctx, leaseReady) }()
	go func() { defer r.wg.Done(); r.publishLoop(lctx, leaseReady) }()
	go func() { defer r.wg.Done(); r.pruneLoop(lctx) }()
	go func() { defer r.wg.Done(); r.statsLoop(lctx) }()
	go func() { r.wg.Wait(); close(r.done) }()
	return nil
}

// Run starts the relay and blocks until ctx ends (then it closes the relay
// and returns nil) or the relay stops on its own (injected fault).
func (r *Relay) Run(ctx context.Context) error {
	if err := r.Start(ctx); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		cctx, cancel := context.WithTimeout(context.Background(), r.cfg.AckTimeout+time.Second)
		defer cancel()
		return r.Close(cctx)
	case err := <-r.fatal:
		return err
	}
}

// Close stops the relay, marking within ctx what was already acked, and
// releases the lease so a standby takes over at once. Idempotent.
func (r *Relay) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	started := r.started
	r.mu.Unlock()
	if !started {
		return nil
	}
	r.cancel()
	select {
	case <-r.done:
	case <-ctx.Done():
		return fmt.Errorf("outboxrelay: close: %w", ctx.Err())
	}
	r.mu.Lock()
	l, killed := r.lease, r.killed
	r.mu.Unlock()
	if l != nil && !killed {
		l.Release(ctx)
	}
	r.m.leader.Store(false)
	return nil
}

// Ready is closed once the relay has reached the lease bucket and takes
// part in the election (it may still be the standby).
func (r *Relay) Ready() <-chan struct{} { return r.ready }

// Counts returns the publishes by outcome so far.
func (r *Relay) Counts() Counts { return r.m.counts() }

// Leader reports whether this relay holds the lease now.
func (r *Relay) Leader() bool {
	r.mu.Lock()
	l := r.lease
	r.mu.Unlock()
	return l != nil && l.Token() != 0
}

// kill stops the relay as a crash would: no mark, no lease release.
func (r *Relay) kill(err error) {
	r.mu.Lock()
	r.killed = true
	r.mu.Unlock()
	r.m.leader.Store(false)
	r.cancel()
	select {
	case r.fatal <- err:
	default:
	}
}

func (r *Relay) leaseLoop(ctx context.Context, ready chan<- struct{}) {
	var l *kvlease.Lease
	backoff := r.cfg.BackoffMin
	for l == nil {
		kv, err := r.bindBucket(ctx)
		if err == nil {
			l = kvlease.New(kv, r.cfg.Name, func() []byte { return []byte(r.cfg.Holder) }, kvlease.Config{TTL: r.cfg.LeaseTTL})
			break
		}
		r.log.Warn("outboxrelay: lease bucket unavailable, retrying", "err", err)
		if !retry.Sleep(ctx, jitter(backoff)) {
			return
		}
		backoff = min(backoff*2, r.cfg.BackoffMax)
	}
	r.mu.Lock()
	r.lease = l
	r.mu.Unlock()
	close(ready)
	var last uint64
	for {
		tok, err := l.Tick(ctx)
		if err != nil {
			r.log.Warn("outboxrelay: lease", "err", err)
		}
		if tok != last {
			if tok != 0 {
				r.log.Info("outboxrelay: lease acquired", "token", tok)
				select {
				case r.acquired <- struct{}{}:
				default:
				}
			} else {
				r.log.Info("outboxrelay: lease lost")
			}
			last = tok
		}
		r.m.leader.Store(tok != 0)
		if !retry.Sleep(ctx, r.cfg.LeaseTTL/4) {
			return
		}
	}
}

func (r *Relay) bindBucket(ctx context.Context) (jetstream.KeyValue, error) {
	ctx, cancel := context.WithTimeout(ctx, 14*time.Second)
	defer cancel()
	return kvutil.OpenKeep(ctx, r.js, jetstream.KeyValueConfig{
		Bucket: r.cfg.LeaseBucket, Description: "outboxrelay leader leases, one key per outbox",
		History: 1, Replicas: r.cfg.LeaseReplicas, Storage: jetstream.FileStorage,
	})
}

func (r *Relay) publishLoop(ctx context.Context, leaseReady <-chan struct{}) {
	select {
	case <-leaseReady:
	case <-ctx.Done():
		return
	}
	r.mu.Lock()
	l := r.lease
	r.mu.Unlock()
	backoff := r.cfg.BackoffMin
	for ctx.Err() == nil {
		tok := l.Token()
		if tok == 0 {
			t := time.NewTimer(min(r.cfg.LeaseTTL/8, 250*time.Millisecond))
			select {
			case <-ctx.Done():
			case <-r.acquired:
			case <-t.C:
			}
			t.Stop()
			continue
		}
		// The first read overlaps the fence (a read changes nothing; the
		// pipeline publishes only once the token is recorded), so the
		// first publishes do not wait for two database round trips. A
		// record the previous holder marks in between is republished: a
		// duplicate with the same Nats-Msg-Id, as after any takeover.
		rctx, rcancel := context.WithCancel(ctx)
		first := r.firstRead(rctx)
		if err := r.store.Fence(ctx, tok); err != nil {
			rcancel()
			if errors.Is(err, ErrFenced) {
				l.Drop()
			}
			r.log.Warn("outboxrelay: fence", "err", err, "backoff", backoff)
			retry.Sleep(ctx, jitter(backoff))
			backoff = min(backoff*2, r.cfg.BackoffMax)
			continue
		}
		backoff = r.cfg.BackoffMin
		err := r.runPipeline(ctx, l, tok, first)
		rcancel()
		switch {
		case errors.Is(err, ErrInjectedFault):
			return
		case errors.Is(err, ErrFenced):
			r.log.Warn("outboxrelay: fenced by a newer relay", "err", err)
		case errors.Is(err, errLeaseLost):
			r.log.Warn("outboxrelay: lease lapsed, publishing stopped")
		}
	}
}

func (r *Relay) isKilled() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.killed
}

func classify(err error) string {
	if jserr.Refused(err) {
		return OutcomeError
	}
	return OutcomeUnknown
}

func (r *Relay) pruneLoop(ctx context.Context) {
	for retry.Sleep(ctx, r.cfg.PruneInterval) {
		if !r.Leader() {
			continue
		}
		before := time.Now().Add(-r.cfg.Retention)
		for ctx.Err() == nil {
			n, err := r.store.Prune(ctx, before, r.cfg.PruneBatch)
			if err != nil {
				r.log.Warn("outboxrelay: prune", "err", err)
				break
			}
			if n < r.cfg.PruneBatch {
				break
			}
			retry.Sleep(ctx, 10*time.Millisecond) // let writers in between batches
		}
	}
}

func (r *Relay) statsLoop(ctx context.Context) {
	for {
		sctx, cancel := context.WithTimeout(ctx, r.cfg.StatsInterval)
		s, err := r.store.Stats(sctx)
		cancel()
		if err == nil {
			r.m.setStats(s)
		}
		if !retry.Sleep(ctx, r.cfg.StatsInterval) {
			return
		}
	}
}

// jitter returns a duration in [d/2, d).
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2)
}
