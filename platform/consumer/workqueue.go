package consumer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/jspull"
	"github.com/msgplatform/platform/internal/parallel"
	"github.com/msgplatform/platform/internal/retry"
	"github.com/msgplatform/platform/internal/tick"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/dlq"
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
	Metrics  *Metrics
	Logger   *slog.Logger
	// NoDLQRouter: do not run a dlq.Router for the queue.
	NoDLQRouter bool
	// ID names this Workers instance's session (default: a random id).
	ID string
	// SessionHeartbeat is how often the instance renews its session
	// (default 1s); SessionTTL how long a session may go unrenewed before
	// live peers give its jobs back (default 5s). See WorkerSessionsBucket.
	SessionHeartbeat, SessionTTL time.Duration
	// Middleware wraps the handler, the first outermost, inside the
	// runtime's own steps (see Middleware).
	Middleware []Middleware
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
	chain    Handler // the delivery chain of a job (chain.go)
	lease    time.Duration
	sem      chan struct{}
	cancel   context.CancelFunc
	jobCtx   context.Context
	stopJobs context.CancelFunc
	loopDone chan struct{}
	wg       sync.WaitGroup
	router   *dlq.Router
	sess     *sessions
	crashed  atomic.Bool
	once     sync.Once
	holding  atomic.Int64 // of those, how many wait for a slot now
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
	if !platform.ValidObjectName(cfg.Queue) {
		errs = append(errs, fmt.Errorf("queue: must be a queue name, got %q", cfg.Queue))
	}
	if handler == nil {
		errs = append(errs, errors.New("handler: required"))
	}
	if cfg.MaxLease < 0 {
		errs = append(errs, fmt.Errorf("max_lease: must be >= 0, got %s", cfg.MaxLease))
	}
	if err := checkMiddleware(cfg.Middleware); err != nil {
		errs = append(errs, err)
	}
	if cfg.SessionHeartbeat == 0 {
		cfg.SessionHeartbeat = DefaultSessionHeartbeat
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = platform.DefaultSessionTTL
	}
	if cfg.SessionHeartbeat < 0 || cfg.SessionTTL < 2*cfg.SessionHeartbeat {
		errs = append(errs, fmt.Errorf("session_ttl: must be at least twice session_heartbeat (%s), got %s", cfg.SessionHeartbeat, cfg.SessionTTL))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: workers: %w", platform.ErrInvalidSpec, errors.Join(errs...))
	}
	return &Workers{js: js, cfg: cfg, handler: handler, log: cfg.Logger.With("queue", cfg.Queue),
		budget: newBudget(cfg.Retry.Budget), sem: make(chan struct{}, cfg.Concurrency), loopDone: make(chan struct{})}, nil
}

// Start binds to the queue's consumer and starts claiming jobs.
func (w *Workers) Start(ctx context.Context) error {
	c, err := w.js.Consumer(ctx, platform.StreamName(w.cfg.Queue), platform.QueueConsumer)
	if err != nil {
		return fmt.Errorf("platform: workers of %s: %w", w.cfg.Queue, err)
	}
	info := c.CachedInfo()
	w.cons, w.lease = c, info.Config.AckWait
	if w.cfg.MaxLease == 0 {
		w.cfg.MaxLease = 10 * w.lease
	}
	set := newSettler(w.js, w.cfg.Queue, platform.QueueConsumer, w.cfg.Queue, w.cfg.Retry, info.Config.MaxDeliver, w.budget, w.cfg.Metrics, "", w.crashed.Load)
	if err := w.startSessions(ctx); err != nil {
		return err
	}
	set.failures = dlq.NewFirstFailures(w.js, w.sess.replicas)
	admit, run := set.compose(w.underLease, w.cfg.Middleware, w.handler)
	w.chain = admit(run)
	if !w.cfg.NoDLQRouter {
		w.router = dlq.NewRouter(w.js, []string{w.cfg.Queue}, w.log)
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
// at the server; the server sends a heartbeat every queuePullHeartbeat
// while it waits, and a request that goes silent for two heartbeats (a
// node restarted, a consumer leader moved) is presumed gone and asked
// again.
const (
	queuePullExpiry    = 2 * time.Second
	queuePullHeartbeat = time.Second
)

// claimLanes bounds how many pull inboxes Workers claim through at once
// (and never more than Concurrency). A lane has one request at a time,
// for as many jobs as it holds free slots for, so its claims are a
// string of round trips to the consumer's leader; lanes let them overlap,
// so throughput grows with the lanes instead of being bound by one round
// trip per claim. Each idle lane keeps one
// request waiting at the server (the consumer's MaxWaiting, 512 by
// default, bounds them over all instances) and renews it every
// queuePullExpiry.
const claimLanes = 16

// run claims jobs through min(Concurrency, claimLanes) lanes.
func (w *Workers) run(ctx context.Context) {
	defer close(w.loopDone)
	var lanes sync.WaitGroup
	for range min(w.cfg.Concurrency, claimLanes) {
		lanes.Go(func() { w.claimLane(ctx) })
	}
	lanes.Wait()
}

// claimLane runs one lane: a pullInbox (one inbox for the lane's life,
// the pull protocol spoken directly) whose requests ask for exactly as
// many jobs as the lane holds free slots for. So a job is claimed, and
// its lease starts, only when a handler can take it, and every job the
// server sends reaches the lane at once:
//   - a job served late (a request that reached the server after its
//     expiry by the client's clock, on a loaded machine or a slow link)
//     still arrives (TestWorkersTakeAJobServedLate);
//   - a request presumed gone (silent for two heartbeats: a reconnect, a
//     node restarted) is asked again; if it was not gone after all, its
//     jobs are more than the lane holds slots for, and each waits for a
//     slot with its lease renewed (hold), never unseen with its lease
//     running (TestWorkersHoldJobsBeyondTheirSlots).
//
// When the workers close, the lane stops asking and gives back at once
// (NAK) what reaches it until its inbox is gone; when they crash it
// drops it.
func (w *Workers) claimLane(ctx context.Context) {
	reserved := 0 // slots this lane holds for the jobs it asks for
	defer func() {
		for ; reserved > 0; reserved-- {
			<-w.sem
		}
	}()
	var (
		in          *pullInbox
		live        bool      // a request of the lane waits at the server
		asked       int       // jobs the live request may still bring
		heard       time.Time // when the lane last heard from the server
		warned      bool
		tick        = time.NewTicker(queuePullHeartbeat / 2)
		presumeGone = 2*queuePullHeartbeat + queuePullHeartbeat/2
	)
	defer tick.Stop()
	defer func() {
		if in != nil {
			w.unclaim(in)
		}
	}()
	refused := func(why string) {
		if !warned {
			w.log.Warn("workers: pull requests refused; asking again each second", "why", why)
			warned = true
		}
		retry.Sleep(ctx, time.Second)
	}
	for ctx.Err() == nil {
		if in == nil {
			var err error
			if in, err = newPullInbox(w.js, platform.StreamName(w.cfg.Queue), platform.QueueConsumer); err != nil {
				refused(err.Error())
				continue
			}
		}
		var slot chan struct{} // w.sem while the lane waits for a slot to ask with
		if !live && w.holding.Load() > 0 {
			// Held jobs take the free slots first (else a lane could keep
			// re-asking with the only slot while a held job waits for it).
			for ; reserved > 0; reserved-- {
				<-w.sem
			}
		}
		if !live && reserved == 0 && w.holding.Load() == 0 {
			slot = w.sem
		}
		if !live && reserved > 0 {
		more:
			for reserved < pullBuffer {
				select {
				case w.sem <- struct{}{}:
					reserved++
				default:
					break more
				}
			}
			if err := in.request(jspull.Request{Batch: reserved, Expires: queuePullExpiry, Heartbeat: queuePullHeartbeat}); err != nil {
				refused(err.Error())
				continue
			}
			live, asked, heard = true, reserved, time.Now()
		}
		select {
		case slot <- struct{}{}:
			reserved = 1
		case m := <-in.msgs: // read while waiting for a slot too: nothing waits unseen
			heard = time.Now()
			switch code, desc := pullStatus(m); code {
			case 0: // a job
				if asked--; asked <= 0 {
					live = false // the request has what it asked for
				}
				if reserved > 0 {
					reserved-- // the job's now: it frees the slot when done
					w.wg.Add(1)
					go w.job(&pulledMsg{nc: in.nc, msg: m})
				} else {
					w.hold(ctx, &pulledMsg{nc: in.nc, msg: m})
				}
			case jspull.Heartbeat: // the request waits
			case jspull.Expired, jspull.NoMessages:
				live = false
			case jspull.Ended:
				live = false
				if strings.Contains(desc, "Leadership Change") || strings.Contains(desc, "Server Shutdown") {
					retry.Sleep(ctx, 50*time.Millisecond) // a new leader takes the next
				} else {
					refused(fmt.Sprintf("%d %s", code, desc)) // consumer deleted, too many waiting...
				}
			default: // NoResponders: no consumer answers
				live = false
				refused(fmt.Sprintf("%d %s", code, desc))
			}
		case <-tick.C:
			if live && time.Since(heard) > presumeGone {
				live = false
			}
		case <-ctx.Done():
		}
	}
}

// hold runs a job that reached a lane holding no slot for it (a request
// presumed gone that was not): it waits for a slot with its lease
// renewed, or is given back if the workers stop claiming first. Lanes
// whose request ends give up their slots while a held job waits, and ask
// for no more until none does.
func (w *Workers) hold(ctx context.Context, raw jetstream.Msg) {
	w.cfg.Metrics.jobHeld(w.cfg.Queue)
	w.holding.Add(1)
	w.wg.Add(1)
	go func() {
		rctx, stopRenewing := context.WithCancel(ctx)
		go w.renew(rctx, raw)
		select {
		case w.sem <- struct{}{}:
			stopRenewing()
			w.holding.Add(-1)
			w.job(raw) // renews the lease itself while it runs
		case <-ctx.Done():
			stopRenewing()
			w.holding.Add(-1)
			if !w.crashed.Load() {
				_ = raw.Nak()
			}
			w.wg.Done()
		}
	}()
}

// unclaim ends a lane's inbox: after a crash it drops what the server
// sent; after a close it gives it back (NAK), including what arrives in
// the moment before the server learns the inbox is gone (it then ends
// the lane's request rather than serve it).
func (w *Workers) unclaim(in *pullInbox) {
	if w.crashed.Load() {
		in.close()
		return
	}
	giveBack := func(m *nats.Msg) {
		if code, _ := pullStatus(m); code == 0 {
			_ = (&pulledMsg{nc: in.nc, msg: m}).Nak()
		}
	}
	grace := time.After(50 * time.Millisecond)
	for waiting := true; waiting; {
		select {
		case m := <-in.msgs:
			giveBack(m)
		case <-grace:
			waiting = false
		}
	}
	in.close()
	for {
		select {
		case m := <-in.msgs:
			giveBack(m)
		default:
			return
		}
	}
}

func (w *Workers) job(raw jetstream.Msg) {
	defer w.wg.Done()
	defer func() { <-w.sem }()
	w.sess.hold(raw.Reply())
	defer w.sess.release(raw.Reply())
	meta, err := raw.Metadata()
	if err != nil {
		return
	}
	_ = w.chain(context.Background(), newMessage(raw, meta, 0))
}

// underLease is the workers' step around the handler: the handler's ctx ends
// at MaxLease or when the workers stop their jobs, the job's lease is
// renewed until then, and a job that fails while the workers close is
// given back at once.
func (w *Workers) underLease(next Handler) Handler {
	return func(_ context.Context, m *Message) error {
		ctx, cancel := context.WithTimeout(w.jobCtx, w.cfg.MaxLease)
		defer cancel()
		go w.renew(ctx, m.raw)
		err := next(ctx, m)
		cancel()
		if err != nil && !w.crashed.Load() && w.jobCtx.Err() != nil {
			_ = m.raw.Nak() // closing: give it back now
			m.outcome = outcomeRetry
		}
		return err
	}
}

// renew keeps the job's lease while ctx lives (at most MaxLease).
func (w *Workers) renew(ctx context.Context, raw jetstream.Msg) {
	tick.Repeat(ctx, max(w.lease/3, 10*time.Millisecond), nil, func(bool) bool {
		if w.crashed.Load() {
			return false
		}
		_ = raw.InProgress()
		return true
	})
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
		done := parallel.Done(&w.wg)
		select {
		case <-done:
		case <-ctx.Done():
			w.stopJobs()
			<-done
		}
		w.stopJobs()
		w.sess.close(ctx, true)
		w.detach(ctx)
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
		w.detach(context.Background())
	})
}

// detach closes the workers' DLQ router (within ctx) and removes them
// from Metrics.
func (w *Workers) detach(ctx context.Context) {
	if w.router != nil {
		_ = w.router.Close(ctx)
	}
	if w.cfg.Metrics != nil {
		w.cfg.Metrics.removeWorkers(w)
	}
}
