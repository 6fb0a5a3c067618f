package platform

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// WorkersConfig configures the workers of a queue.
type WorkersConfig struct {
	Queue string
	// Concurrency is the number of jobs run at once (default 8).
	Concurrency int
	// MaxLease bounds how long a job's lease is renewed while its handler
	// runs (default 10 leases). Past it the handler's ctx is cancelled and
	// renewals stop, so the job comes back to another worker after one
	// more lease.
	MaxLease time.Duration
	Retry    RetryPolicy
	Metrics  *ConsumerMetrics
	Logger   *slog.Logger
	// NoDLQRouter: do not run a DLQRouter for the queue.
	NoDLQRouter bool
	// ID names this Workers instance's session (default: a random id).
	ID string
	// SessionHeartbeat is how often the instance renews its session
	// (default 1s); SessionTTL how long a session may go unrenewed before
	// live peers give its jobs back (default 5s). See WorkerSessionsBucket.
	SessionHeartbeat, SessionTTL time.Duration
}

// Workers compete for the jobs of a queue through its one durable
// consumer, QueueConsumer: the broker delivers each job to one worker at a
// time under a lease (the consumer's AckWait, the queue's Lease). While a
// handler runs, its lease is renewed (InProgress) every third of the
// lease, up to MaxLease. A worker that crashes stops renewing, so its job
// comes back after at most one lease. A worker that closes gracefully
// gives its unfinished jobs back at once (Nak). A worker that crashes or
// loses its connection stops renewing its session too: a live peer gives
// its jobs back (Nak on their ack subjects) about SessionTTL later, well
// before the lease (see WorkerSessionsBucket for why not a shorter lease).
//
// Failures follow the retry policy; the attempts are the consumer's
// MaxDeliver (the queue's MaxAttempts). A dead-lettered job is copied to
// the queue's DLQ before it is terminated (AckTerm deletes it from the
// work-queue stream).
type Workers struct {
	js      jetstream.JetStream
	cfg     WorkersConfig
	handler Handler
	log     *slog.Logger
	budget  *budget

	cons     jetstream.Consumer
	set      *settler
	lease    time.Duration
	sem      chan struct{}
	cancel   context.CancelFunc
	jobCtx   context.Context
	stopJobs context.CancelFunc
	loopDone chan struct{}
	wg       sync.WaitGroup
	router   *DLQRouter
	sess     *sessions
	crashed  atomic.Bool
	once     sync.Once
	claiming sync.RWMutex // read-held by claim; see stopClaiming
	unclaim  bool         // under claiming: claim starts no job
}

// NewWorkers returns workers for cfg.Queue running handler per job.
func NewWorkers(js jetstream.JetStream, cfg WorkersConfig, handler Handler) (*Workers, error) {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 8
	}
	cfg.Retry = cfg.Retry.withDefaults()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	var errs []error
	if !objectNameRE.MatchString(cfg.Queue) {
		errs = append(errs, fmt.Errorf("queue: must be a queue name, got %q", cfg.Queue))
	}
	if handler == nil {
		errs = append(errs, errors.New("handler: required"))
	}
	if cfg.MaxLease < 0 {
		errs = append(errs, fmt.Errorf("max_lease: must be >= 0, got %s", cfg.MaxLease))
	}
	if cfg.SessionHeartbeat == 0 {
		cfg.SessionHeartbeat = DefaultSessionHeartbeat
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = DefaultSessionTTL
	}
	if cfg.SessionHeartbeat < 0 || cfg.SessionTTL < 2*cfg.SessionHeartbeat {
		errs = append(errs, fmt.Errorf("session_ttl: must be at least twice session_heartbeat (%s), got %s", cfg.SessionHeartbeat, cfg.SessionTTL))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: workers: %w", ErrInvalidSpec, errors.Join(errs...))
	}
	return &Workers{js: js, cfg: cfg, handler: handler, log: cfg.Logger.With("queue", cfg.Queue),
		budget: newBudget(cfg.Retry.Budget), sem: make(chan struct{}, cfg.Concurrency), loopDone: make(chan struct{})}, nil
}

// Start binds to the queue's consumer and starts claiming jobs.
func (w *Workers) Start(ctx context.Context) error {
	c, err := w.js.Consumer(ctx, StreamName(w.cfg.Queue), QueueConsumer)
	if err != nil {
		return fmt.Errorf("platform: workers of %s: %w", w.cfg.Queue, err)
	}
	info := c.CachedInfo()
	w.cons, w.lease = c, info.Config.AckWait
	if w.cfg.MaxLease == 0 {
		w.cfg.MaxLease = 10 * w.lease
	}
	w.set = newSettler(w.js, w.cfg.Queue, QueueConsumer, w.cfg.Queue, w.cfg.Retry, info.Config.MaxDeliver, w.budget, w.cfg.Metrics, "")
	if err := w.startSessions(ctx); err != nil {
		return err
	}
	w.set.failures = newFailureLog(w.js, w.sess.replicas)
	if !w.cfg.NoDLQRouter {
		w.router = NewDLQRouter(w.js, []string{w.cfg.Queue}, w.log)
		if err := w.router.Start(ctx); err != nil {
			return err
		}
	}
	var rctx context.Context
	rctx, w.cancel = context.WithCancel(context.Background())
	w.jobCtx, w.stopJobs = context.WithCancel(context.Background())
	if w.cfg.Metrics != nil {
		w.cfg.Metrics.addWorkers(w)
	}
	go w.run(rctx)
	return nil
}

// queuePullExpiry is how long each of the workers' pull requests waits
// at the server; the server sends a heartbeat at half of it, and a
// request that goes silent for two heartbeats (a node restarted, a
// consumer leader moved) is replaced.
const queuePullExpiry = 2 * time.Second

// claimLanes bounds how many pull subscriptions Workers claim through at
// once (and never more than Concurrency): one request at a time per
// lane, so the claims of a lane are a string of round trips to the
// consumer's leader (platformctl bench queue: Concurrency 8 drained 171
// jobs/s through one fetch loop, about 750 through 4 lanes, about 1,650
// through 8). Each idle lane keeps one request waiting at the server
// (the consumer's MaxWaiting, 512 by default, bounds them over all
// instances) and renews it every queuePullExpiry.
const claimLanes = 16

// run claims jobs through min(Concurrency, claimLanes) lanes, each a
// pull subscription (nats.go Consume, one job per request) that lives as
// long as the workers: every pull request names the same inbox, so a job
// the server serves late (a request that reached it after its expiry by
// the client's clock, on a loaded machine or a slow link) still reaches
// claim. With a fetch per claim, nats.go gave up on the request's inbox
// a second after its expiry, and a job served to it afterwards waited out
// a whole lease (TestWorkersTakeAJobServedLate).
//
// A lane sends its request only holding a slot (its reservation), so the
// jobs claimed never outnumber the free slots: a claimed job's lease
// starts when a handler can take it.
func (w *Workers) run(ctx context.Context) {
	defer close(w.loopDone)
	var lanes sync.WaitGroup
	for range min(w.cfg.Concurrency, claimLanes) {
		lanes.Go(func() { w.claimLane(ctx) })
	}
	lanes.Wait()
}

// claimLane runs one lane; its subscription is started again if it ends
// by itself (the consumer deleted and created again).
func (w *Workers) claimLane(ctx context.Context) {
	reserved := false // this lane holds a slot for its next job
	defer func() {
		if reserved {
			<-w.sem
		}
	}()
	warned := false
	for {
		if !reserved {
			select {
			case w.sem <- struct{}{}:
				reserved = true
			case <-ctx.Done():
				return
			}
		}
		cc, err := w.cons.Consume(w.claim(ctx, &reserved), jetstream.PullMaxMessages(1), jetstream.PullExpiry(queuePullExpiry))
		if err == nil {
			select {
			case <-ctx.Done():
				w.stopClaiming(cc)
				return
			case <-cc.Closed():
				w.claiming.Lock() // reserved is the lane's again
				w.claiming.Unlock()
			}
		}
		if ctx.Err() != nil {
			return
		}
		if !warned {
			if err == nil {
				err = errors.New("ended by the server or the connection")
			}
			w.log.Warn("workers: pull subscription lost; starting another each second", "err", err)
			warned = true
		}
		sleepCtx(ctx, time.Second)
	}
}

// claim is a lane's handler: it runs the job in the lane's reserved slot
// (or waits for one: a second delivery to one reservation, after a
// reconnect), then returns once it holds a slot again. nats.go sends the
// lane's next pull request (for one job) when it returns. A job
// delivered while the workers close is given back at once.
func (w *Workers) claim(ctx context.Context, reserved *bool) jetstream.MessageHandler {
	return func(msg jetstream.Msg) {
		w.claiming.RLock()
		defer w.claiming.RUnlock()
		giveBack := func() {
			if !w.crashed.Load() {
				_ = msg.Nak()
			}
		}
		if ctx.Err() != nil || w.unclaim {
			giveBack() // the lane releases its reservation
			return
		}
		if !*reserved {
			select {
			case w.sem <- struct{}{}:
				*reserved = true
			case <-ctx.Done():
				giveBack()
				return
			}
		}
		*reserved = false // the job's now: it frees the slot when done
		w.wg.Add(1)
		go w.job(msg)
		select {
		case w.sem <- struct{}{}:
			*reserved = true
		case <-ctx.Done():
		}
	}
}

// stopClaiming ends a lane's subscription: a crash drops what it holds;
// a close lets it hand what it holds to claim, which gives it back.
// Either way it returns once no claim runs, and a later one starts no job
// (unclaim), so Close's wait covers every job.
func (w *Workers) stopClaiming(cc jetstream.ConsumeContext) {
	defer func() {
		w.claiming.Lock()
		w.unclaim = true
		w.claiming.Unlock()
	}()
	if w.crashed.Load() {
		cc.Stop()
		return
	}
	cc.Drain()
	select {
	case <-cc.Closed():
	case <-time.After(5 * time.Second): // the connection is gone
	}
}

func (w *Workers) job(raw jetstream.Msg) {
	defer w.wg.Done()
	defer func() { <-w.sem }()
	w.sess.hold(raw.Reply())
	defer w.sess.release(raw.Reply())
	if w.set.canary(raw, w.crashed.Load) || w.set.skipRedrive(raw, w.crashed.Load) {
		return // acked here, never handed to the handler
	}
	meta, err := raw.Metadata()
	if err != nil {
		return
	}
	m := newMessage(raw, meta, 0)
	ctx, cancel := context.WithTimeout(w.jobCtx, w.cfg.MaxLease)
	defer cancel()
	go w.renew(ctx, raw)
	ctx, span := startConsumeSpan(ctx, m, w.cfg.Queue)
	start := time.Now()
	herr := callHandler(ctx, w.handler, m)
	span.end(herr)
	w.cfg.Metrics.handled(w.cfg.Queue, "", time.Since(start))
	cancel()
	if w.crashed.Load() {
		return
	}
	if w.jobCtx.Err() != nil && herr != nil {
		_ = raw.Nak() // closing: give it back now
		return
	}
	w.set.settle(context.Background(), m, herr, w.crashed.Load)
}

// renew keeps the job's lease while ctx lives (at most MaxLease).
func (w *Workers) renew(ctx context.Context, raw jetstream.Msg) {
	t := time.NewTicker(max(w.lease/3, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if w.crashed.Load() {
				return
			}
			_ = raw.InProgress()
		}
	}
}

// Close stops claiming jobs, cancels running handlers after ctx ends (a
// handler that fails then is given back at once) and waits for them.
// Idempotent.
func (w *Workers) Close(ctx context.Context) error {
	w.once.Do(func() {
		if w.cancel == nil {
			return
		}
		w.cancel()
		<-w.loopDone
		done := make(chan struct{})
		go func() { w.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			w.stopJobs()
			<-done
		}
		w.stopJobs()
		w.sess.close(ctx, true)
		if w.router != nil {
			_ = w.router.Close(ctx)
		}
		if w.cfg.Metrics != nil {
			w.cfg.Metrics.removeWorkers(w)
		}
	})
	return nil
}

// crash stops the workers as a crash would: no ack, no nak, no renewal.
func (w *Workers) crash() {
	w.crashed.Store(true)
	w.once.Do(func() {
		w.cancel()
		w.stopJobs()
		w.sess.close(context.Background(), false)
		if w.router != nil {
			_ = w.router.Close(context.Background())
		}
		if w.cfg.Metrics != nil {
			w.cfg.Metrics.removeWorkers(w)
		}
	})
}
