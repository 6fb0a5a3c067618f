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

	"github.com/msgplatform/platform/platform"
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

	mu      sync.Mutex
	started bool
	closed  bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	fatal   chan error
	done    chan struct{}
	lease   *lease
	killed  bool
	ready   chan struct{}
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
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(cfg.MaxInFlight*2),
		jetstream.WithPublishAsyncTimeout(cfg.AckTimeout))
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
	return &Relay{
		cfg: cfg, store: store, js: js, nc: nc, m: m,
		log:   log.With("outbox", cfg.Name, "holder", cfg.Holder),
		fatal: make(chan error, 1), done: make(chan struct{}), ready: make(chan struct{}),
	}, nil
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

// Close stops the relay, waiting within ctx for the round in flight, and
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
		l.release(ctx)
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
	return l != nil && l.current() != 0
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
	var l *lease
	backoff := r.cfg.BackoffMin
	for l == nil {
		kv, err := r.bindBucket(ctx)
		if err == nil {
			l = newLease(kv, r.cfg.Name, r.cfg.Holder, r.cfg.LeaseTTL)
			break
		}
		r.log.Warn("outboxrelay: lease bucket unavailable, retrying", "err", err)
		if !sleep(ctx, jitter(backoff)) {
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
		tok, err := l.tick(ctx)
		if err != nil {
			r.log.Warn("outboxrelay: lease", "err", err)
		}
		if tok != last {
			if tok != 0 {
				r.log.Info("outboxrelay: lease acquired", "token", tok)
			} else {
				r.log.Info("outboxrelay: lease lost")
			}
			last = tok
		}
		r.m.leader.Store(tok != 0)
		if !sleep(ctx, r.cfg.LeaseTTL/4) {
			return
		}
	}
}

func (r *Relay) bindBucket(ctx context.Context) (jetstream.KeyValue, error) {
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	kv, err := r.js.KeyValue(lctx, r.cfg.LeaseBucket)
	cancel()
	if err == nil {
		return kv, nil
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	kv, err = r.js.CreateKeyValue(cctx, jetstream.KeyValueConfig{
		Bucket: r.cfg.LeaseBucket, Description: "outboxrelay leader leases, one key per outbox",
		History: 1, Replicas: r.cfg.LeaseReplicas, Storage: jetstream.FileStorage,
	})
	if err != nil {
		// Another relay may have created it meanwhile.
		lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if kv, err2 := r.js.KeyValue(lctx, r.cfg.LeaseBucket); err2 == nil {
			return kv, nil
		}
	}
	return kv, err
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
	var fenced uint64
	backoff := r.cfg.BackoffMin
	fail := func(what string, err error) bool {
		r.log.Warn("outboxrelay: "+what, "err", err, "backoff", backoff)
		ok := sleep(ctx, jitter(backoff))
		backoff = min(backoff*2, r.cfg.BackoffMax)
		return ok
	}
	for ctx.Err() == nil {
		tok := l.current()
		if tok == 0 {
			sleep(ctx, min(r.cfg.LeaseTTL/8, 250*time.Millisecond))
			continue
		}
		if tok != fenced {
			if err := r.store.Fence(ctx, tok); err != nil {
				if errors.Is(err, ErrFenced) {
					l.drop()
				}
				if !fail("fence", err) {
					return
				}
				continue
			}
			fenced = tok
		}
		recs, err := r.store.Unsent(ctx, r.cfg.BatchSize)
		if err != nil {
			if !fail("read unsent", err) {
				return
			}
			continue
		}
		if len(recs) == 0 {
			sleep(ctx, r.cfg.PollInterval)
			continue
		}
		acked, pubErr := r.publish(ctx, l, tok, recs)
		if len(acked) > 0 {
			if h := r.cfg.Faults.AfterPublish; h != nil {
				if err := h(acked); err != nil {
					r.kill(fmt.Errorf("%w: after publish, before mark: %w", ErrInjectedFault, err))
					return
				}
			}
			seqs := make([]uint64, len(acked))
			for i, rec := range acked {
				seqs[i] = rec.Seq
			}
			if err := r.store.MarkSent(context.WithoutCancel(ctx), tok, seqs); err != nil {
				if errors.Is(err, ErrFenced) {
					l.drop()
				}
				if !fail("mark sent", err) {
					return
				}
				continue
			}
		}
		if pubErr != nil {
			if !fail("publish", pubErr) {
				return
			}
			continue
		}
		backoff = r.cfg.BackoffMin
	}
}

// publish sends recs in waves: each wave publishes the oldest unpublished
// record of every key at once (async) and waits for the acks, so a key's
// next record is only sent once the previous one is stored. A key whose
// publish fails stops for this round, so a retry can never overtake it.
// It returns the acked records and the first failure.
func (r *Relay) publish(ctx context.Context, l *lease, tok uint64, recs []Record) ([]Record, error) {
	type queue struct{ recs []Record }
	byKey := map[string]*queue{}
	var queues []*queue
	for _, rec := range recs {
		k := rec.Topic + "\x00" + rec.Key
		q := byKey[k]
		if q == nil {
			q = &queue{}
			byKey[k] = q
			queues = append(queues, q)
		}
		q.recs = append(q.recs, rec)
	}
	acked := make([]Record, 0, len(recs))
	var firstErr error
	for len(queues) > 0 {
		if l.current() != tok {
			return acked, errors.New("outboxrelay: lease no longer valid")
		}
		n := min(len(queues), r.cfg.MaxInFlight)
		wave := queues[:n]
		ok := r.publishWave(ctx, wave2recs(wave, func(q *queue) Record { return q.recs[0] }), func(i int, dup bool, err error) {
			if err != nil {
				wave[i].recs = nil // this key stops for the round
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			acked = append(acked, wave[i].recs[0])
			if r.cfg.OnAck != nil {
				r.cfg.OnAck(wave[i].recs[0], dup)
			}
			wave[i].recs = wave[i].recs[1:]
		})
		if !ok {
			return acked, ctx.Err()
		}
		next := queues[:0]
		for _, q := range queues {
			if len(q.recs) > 0 {
				next = append(next, q)
			}
		}
		queues = next
	}
	return acked, firstErr
}

func wave2recs[Q any](qs []Q, head func(Q) Record) []Record {
	out := make([]Record, len(qs))
	for i, q := range qs {
		out[i] = head(q)
	}
	return out
}

// publishWave publishes recs async and reports each outcome to done. It
// returns false if ctx ended.
func (r *Relay) publishWave(ctx context.Context, recs []Record, done func(i int, dup bool, err error)) bool {
	futs := make([]jetstream.PubAckFuture, len(recs))
	for i, rec := range recs {
		msg := &nats.Msg{
			Subject: platform.TopicSubject(r.cfg.topicFor(rec.Topic), rec.Key),
			Data:    rec.Payload,
			Header:  nats.Header{},
		}
		for k, v := range rec.Headers {
			msg.Header[k] = append([]string(nil), v...)
		}
		f, err := r.js.PublishMsgAsync(msg, jetstream.WithMsgID(rec.ID))
		if err != nil {
			r.m.count(classify(err))
			done(i, false, fmt.Errorf("outboxrelay: publish %s (event %s): %w", msg.Subject, rec.ID, err))
			continue
		}
		futs[i] = f
	}
	wctx, cancel := context.WithTimeout(ctx, r.cfg.AckTimeout)
	defer cancel()
	for i, f := range futs {
		if f == nil {
			continue
		}
		select {
		case ack := <-f.Ok():
			if ack.Duplicate {
				r.m.count(OutcomeDuplicate)
			} else {
				r.m.count(OutcomeOK)
			}
			done(i, ack.Duplicate, nil)
		case err := <-f.Err():
			r.m.count(classify(err))
			done(i, false, fmt.Errorf("outboxrelay: publish event %s: %w", recs[i].ID, err))
		case <-wctx.Done():
			r.m.count(OutcomeUnknown)
			done(i, false, fmt.Errorf("outboxrelay: publish event %s: no ack within %s (outcome unknown, will retry with the same id)", recs[i].ID, r.cfg.AckTimeout))
		}
	}
	return ctx.Err() == nil
}

func classify(err error) string {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders), errors.As(err, &apiErr):
		return OutcomeError
	}
	return OutcomeUnknown
}

func (r *Relay) pruneLoop(ctx context.Context) {
	for sleep(ctx, r.cfg.PruneInterval) {
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
			sleep(ctx, 10*time.Millisecond) // let writers in between batches
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
		if !sleep(ctx, r.cfg.StatsInterval) {
			return
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// jitter returns a duration in [d/2, d).
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2)
}
