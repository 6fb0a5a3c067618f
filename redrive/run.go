package redrive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/time/rate"

	"github.com/msgplatform/platform/internal/kvlease"
	"github.com/msgplatform/platform/internal/retry"
	"github.com/msgplatform/platform/internal/wire"
)

var (
	// errFenced: another runner (a later epoch) owns the run now.
	errFenced = errors.New("redrive: run fenced by a later claim")
	// errCrashed: a test's fault hook stopped the run like a crash.
	errCrashed = errors.New("redrive: run crashed (fault injected)")
)

// canaryActor is the actor of the pauses the run makes by itself.
const canaryActor = "redrive-canary"

// execute runs a claimed redrive until it completes, pauses or loses its
// claim, holding the run's lease l (nil: it takes it first; without it
// the run does not start, and is adopted after LeaseTTL). A failure it
// cannot get past (the destination refuses events, the DLQ cannot be
// read) pauses it with the reason, for a person to decide.
func (s *Service) execute(ctx context.Context, id string, epoch uint64, h *halter, l *kvlease.Lease) {
	if l == nil {
		var err error
		if l, err = s.takeLease(ctx, id); err != nil {
			s.log.Error("redrive: cannot take the run's lease; it is adopted after the lease TTL", "request", id, "err", err)
			return
		}
	}
	defer l.Drop() // kept, not released: see lease.go
	rn := &runner{s: s, id: id, epoch: epoch, h: h}
	defer rn.holdLease(ctx, l)()
	err := rn.run(ctx)
	switch {
	case err == nil, errors.Is(err, errFenced), errors.Is(err, errCrashed), ctx.Err() != nil:
		if err != nil && !errors.Is(err, errFenced) {
			s.log.Info("redrive: run stopped", "request", id, "err", err)
		}
		return
	}
	s.log.Error("redrive: run failed; pausing it", "request", id, "err", err)
	if rn.rec != nil {
		rn.stopWith(ctx, StatePaused, s.cfg.Instance, "paused on error: "+err.Error())
	}
}

type runner struct {
	s     *Service
	id    string
	epoch uint64
	// h stops the sending before the next publish: a local Pause or
	// Cancel, the record watch (the record is no longer running in this
	// epoch: paused, cancelled or adopted elsewhere), or a background
	// checkpoint that found so.
	h *halter

	// What the sender reads of the record: fixed for the run (rec is
	// replaced by every checkpoint, in the background while sending).
	dest, object, kind string
	maxFail            float64

	rec      *Redrive
	dlqName  string // rec.DLQStream, for the goroutines (checkpoints replace rec)
	seqs     []uint64
	dlq      jetstream.Stream
	w        *watcher
	del      *deleter
	lim      *rate.Limiter
	segStart time.Time
	lastCk   time.Time
	// issued is the index of the next entry to hand to the pipeline;
	// p.Next (the prefix acknowledged and gone from the DLQ) trails it.
	issued int
	fetch  <-chan fetched
	// head is the first fetched entry, taken before the clock started
	// (see firstEntry); issue hands it out first.
	head  *fetched
	items chan item

	flushMu sync.Mutex // serializes flushLinks
	ckMu    sync.Mutex // serializes checkpoints (and guards rec while sending)
	ckBusy  atomic.Bool
	ckWG    sync.WaitGroup // the background checkpoint in flight
	mu      sync.Mutex     // guards p, links, ackErr and bgErr (the acker, deleter and checkpointer write them)
	p       Progress
	links   []Link
	ackErr  error
	bgErr   error // a background checkpoint's failure (errFenced, ...)
	pub     *publisher
	// wc is the service's connection for its runs' reads and publishes
	// (nil: nats.go's; wirepath.go).
	wc *wire.Conn
	// acked counts this run's acknowledged publishes (the acker's);
	// sentAtStart is Progress.Sent when the run started.
	acked       atomic.Int64
	sentAtStart int
	// lastStream is the stream of the last ack (the acker's), so that
	// parsing an ack does not allocate its name again.
	lastStream string
	audit      chan struct{} // wakes the audit flusher (flushLinks off the deleter)
}

// halter is a one-way stop signal, cheap to poll.
type halter struct {
	once sync.Once
	ch   chan struct{}
}

func newHalter() *halter { return &halter{ch: make(chan struct{})} }

func (h *halter) halt() { h.once.Do(func() { close(h.ch) }) }

func (h *halter) halted() bool {
	select {
	case <-h.ch:
		return true
	default:
		return false
	}
}

func newLimiter(r float64) *rate.Limiter {
	if r <= 0 {
		return rate.NewLimiter(rate.Inf, 1)
	}
	// A burst of 250ms worth lets the bucket make up for a slow moment
	// (a GC pause, an fsync, a busy core) without ever running ahead of
	// the rate: it starts empty, so by any time t at most r·t events have
	// been sent since the run began.
	burst := max(1, int(r/4))
	l := rate.NewLimiter(rate.Limit(r), burst)
	l.AllowN(time.Now(), burst)
	return l
}

// fail records the pipeline's first failure.
func (rn *runner) fail(err error) {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	if rn.ackErr == nil {
		rn.ackErr = err
	}
}

// settle advances the position past items (in order) whose entries are
// gone from the DLQ: sent and deleted, or skipped.
func (rn *runner) settle(items []item) {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	for _, it := range items {
		rn.p.Next = it.idx + 1
		if it.skip {
			rn.p.Skipped++
			continue
		}
		rn.p.Sent++
		if rn.p.Phase == PhaseSample {
			rn.p.SampleSent++
		}
		rn.links = append(rn.links, it.link)
	}
}

func (rn *runner) run(ctx context.Context) error {
	s := rn.s
	if rn.h == nil {
		rn.h = newHalter()
	}
	r, _, err := s.get(ctx, rn.id)
	if err != nil {
		return err
	}
	if r.State != StateRunning || r.Epoch != rn.epoch || r.Runner != s.cfg.Instance {
		return errFenced
	}
	rn.rec, rn.p, rn.dlqName = r, r.Progress, r.DLQStream
	rn.sentAtStart = r.Progress.Sent
	rn.dest, rn.object, rn.kind, rn.maxFail = r.Destination, r.object(), r.Kind, r.MaxFailureRate
	if rn.seqs, err = s.selection(ctx, rn.id); err != nil {
		return err
	}
	if rn.dlq, err = s.js.Stream(ctx, r.DLQStream); err != nil {
		return fmt.Errorf("redrive: DLQ %s: %w", r.DLQStream, err)
	}
	if rn.w, err = startWatcher(ctx, s.js, r.WatchDLQ, r.Progress.WatchFrom, rn.id); err != nil {
		return err
	}
	defer rn.w.stop()
	defer rn.watchRecord(ctx)()
	pctx, stopPipeline := context.WithCancel(ctx)
	rn.del = newDeleter(rn, rn.dlq, r.DLQStream)
	rn.issued = rn.p.Next
	if rn.wc = s.acquireWire(); rn.wc != nil {
		defer s.releaseWire()
	}
	if rn.pub, err = newPublisher(s.js.Conn(), rn.wc, s.cfg.Window); err != nil {
		stopPipeline()
		return err
	}
	rn.fetch = rn.prefetch(pctx, rn.p.Next)
	rn.items = make(chan item, s.cfg.Window)
	ackerDone := make(chan struct{})
	rn.audit = make(chan struct{}, 1)
	go rn.del.loop(pctx)
	go func() { defer close(ackerDone); rn.acker(pctx) }()
	go func() { // the links' audit records, written as they settle
		for {
			select {
			case <-pctx.Done():
				return
			case <-rn.audit:
				rn.flushLinks(pctx, false)
			}
		}
	}()
	crashed := false
	defer func() {
		if crashed {
			stopPipeline() // nothing more is acknowledged or written
		}
		close(rn.items)
		<-ackerDone
		<-rn.del.done
		stopPipeline()
		rn.pub.close()
	}()
	// The sending time and the rate's bucket start when the first entry
	// is ready, not when the pipeline starts: reading the DLQ's state and
	// opening the consumer on it take a round trip or two through the
	// meta leader, up to a second on a loaded cluster, which a fast run
	// would otherwise never make up (its bucket holds only a short burst).
	t0 := time.Now()
	rn.firstEntry(ctx)
	rn.lim = newLimiter(r.Rate)
	rn.segStart, rn.lastCk = time.Now(), time.Now()
	if d := rn.segStart.Sub(t0); d > 100*time.Millisecond {
		s.log.Info("redrive: first DLQ entry ready", "request", rn.id, "after", d.Round(time.Millisecond))
	}
	if rn.p.Phase == "" {
		rn.p.Phase = PhaseMain
		if r.SampleSize > 0 {
			rn.p.Phase = PhaseSample
		}
	}
	for {
		switch rn.p.Phase {
		case PhaseSample, PhaseMain:
			end := len(rn.seqs)
			if rn.p.Phase == PhaseSample {
				end = min(end, r.SampleSize)
			}
			if stop, err := rn.send(ctx, end, func() { crashed = true; stopPipeline() }); stop {
				return err
			}
			if err := rn.drain(ctx); err != nil {
				return err
			}
			rn.account()
			rn.mu.Lock()
			if rn.p.Phase == PhaseSample {
				rn.p.Phase = PhaseSampleWait
			} else {
				rn.p.Phase = PhaseSettle
			}
			rn.p.WindowStart = time.Now().UTC()
			rn.mu.Unlock()
			if stop, err := rn.checkpoint(ctx, nil, false); err != nil || stop {
				return rn.drainThen(ctx, err)
			}
		case PhaseSampleWait, PhaseSettle:
			window := rn.window()
			for rn.p.Phase == PhaseSettle || !rn.failing() {
				if time.Since(rn.p.WindowStart) >= window {
					break
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-rn.h.ch:
					return rn.drainThen(ctx, rn.haltErr())
				case <-time.After(min(50*time.Millisecond, time.Until(rn.p.WindowStart.Add(window)))):
				}
				if time.Since(rn.lastCk) >= s.cfg.Checkpoint {
					if stop, err := rn.checkpoint(ctx, nil, false); err != nil || stop {
						return rn.drainThen(ctx, err)
					}
				}
			}
			if rn.p.Phase == PhaseSampleWait {
				if rn.failing() {
					return rn.canaryPause(ctx)
				}
				rn.mu.Lock()
				rn.p.Phase = PhaseMain
				rn.mu.Unlock()
				if stop, err := rn.checkpoint(ctx, nil, false); err != nil || stop {
					return rn.drainThen(ctx, err)
				}
				continue
			}
			return rn.complete(ctx)
		default:
			return fmt.Errorf("redrive: unknown phase %q", rn.p.Phase)
		}
	}
}

// send issues the entries up to index end. It checks the halt signal
// before every publish (a pause or cancel, seen locally or through the
// record watch, stops the sending there), and writes the progress every
// Checkpoint in the background, so the sending does not wait for the
// write. stop: the run ends with err.
func (rn *runner) send(ctx context.Context, end int, crash func()) (stop bool, err error) {
	defer rn.ckWG.Wait()
	s := rn.s
	// lctx ends when the run is halted, so a token wait at a low rate
	// does not delay a pause.
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-rn.h.ch:
			cancel()
		case <-lctx.Done():
		}
	}()
	nextCk := time.Now().Add(s.cfg.Checkpoint)
	for rn.issued < end {
		if rn.h.halted() {
			rn.ckWG.Wait()
			return true, rn.drainThen(ctx, rn.haltErr())
		}
		if rn.lim.Tokens() < 1 {
			rn.pub.flush() // the rate makes the sender wait: what is buffered goes now
		}
		if err := rn.lim.Wait(lctx); err != nil {
			if ctx.Err() == nil && rn.h.halted() {
				continue
			}
			return true, err
		}
		if err := rn.issue(ctx); err != nil {
			return true, err
		}
		if h := s.cfg.afterSend; h != nil {
			if err := h(rn.issued); err != nil {
				crash()
				return true, fmt.Errorf("%w: %v", errCrashed, err)
			}
		}
		if err := rn.pipelineErr(); err != nil {
			rn.ckWG.Wait()
			return true, rn.drainThen(ctx, err)
		}
		if now := time.Now(); !now.Before(nextCk) {
			nextCk = now.Add(s.cfg.Checkpoint)
			rn.checkpointAsync(ctx)
			if rn.p.Phase == PhaseMain && rn.failing() {
				rn.ckWG.Wait()
				if err := rn.drain(ctx); err != nil {
					return true, err
				}
				return true, rn.canaryPause(ctx)
			}
		}
	}
	return false, nil
}

// haltErr is why a background checkpoint halted the run (nil: a person
// paused or cancelled it, or the watch saw the record change).
func (rn *runner) haltErr() error {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	return rn.bgErr
}

// checkpointAsync writes the progress in the background unless a write
// is still in flight; one that finds the run stopped or fenced halts it.
func (rn *runner) checkpointAsync(ctx context.Context) {
	if !rn.ckBusy.CompareAndSwap(false, true) {
		return
	}
	rn.ckWG.Add(1)
	go func() {
		defer rn.ckWG.Done()
		defer rn.ckBusy.Store(false)
		stop, err := rn.checkpoint(ctx, nil, false)
		if err != nil || stop {
			rn.mu.Lock()
			if rn.bgErr == nil {
				rn.bgErr = err
			}
			rn.mu.Unlock()
			rn.h.halt()
		}
	}()
}

// watchRecord halts the run as soon as its record says it is no longer
// running in this epoch on this instance (paused, cancelled, adopted),
// usually well before the next checkpoint would find out. The returned
// func stops the watch. Without a watch (it could not be started) the
// checkpoints still find out.
func (rn *runner) watchRecord(ctx context.Context) func() {
	w, err := rn.s.kv.Watch(ctx, recKey(rn.id), jetstream.UpdatesOnly())
	if err != nil {
		rn.s.log.Warn("redrive: cannot watch the run's record; a pause takes effect at the next checkpoint", "request", rn.id, "err", err)
		return func() {}
	}
	wctx, cancel := context.WithCancel(ctx)
	go func() {
		for {
			select {
			case <-wctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil {
					continue
				}
				if e.Operation() != jetstream.KeyValuePut {
					rn.h.halt()
					return
				}
				var r Redrive
				if json.Unmarshal(e.Value(), &r) != nil {
					continue
				}
				if r.State != StateRunning || r.Epoch != rn.epoch || r.Runner != rn.s.cfg.Instance {
					rn.h.halt()
					return
				}
			}
		}
	}()
	return func() { cancel(); _ = w.Stop() }
}

// firstEntry waits until the prefetcher has the first entry (or has
// nothing, or the run is halted) and keeps it for issue.
func (rn *runner) firstEntry(ctx context.Context) {
	if rn.issued >= len(rn.seqs) {
		return
	}
	select {
	case f, ok := <-rn.fetch:
		if ok {
			rn.head = &f
		}
	case <-rn.h.ch:
	case <-ctx.Done():
	}
}

// issue takes the next prefetched entry and publishes it asynchronously.
func (rn *runner) issue(ctx context.Context) error {
	var f fetched
	if rn.head != nil {
		f, rn.head = *rn.head, nil
	} else {
		select {
		case f = <-rn.fetch:
		default:
			rn.pub.flush() // nothing to send next: what is buffered goes now
			select {
			case f = <-rn.fetch:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	if f.err != nil {
		return rn.drainThen(ctx, f.err)
	}
	it := rn.prepare(f)
	if !it.skip {
		var err error
		for attempt := 0; ; attempt++ {
			it.tok, err = rn.pub.publish(it.link.Subject, it.hdr, it.data)
			if err == nil {
				it.at = time.Now()
				break
			}
			if ctx.Err() != nil || attempt >= 20 {
				return rn.drainThen(ctx, fmt.Errorf("redrive: publish DLQ entry %d: %w", f.seq, err))
			}
			retry.Sleep(ctx, 50*time.Millisecond) // the connection is down: let it reconnect
		}
	}
	select {
	case rn.items <- it:
	default:
		rn.pub.flush() // the window is full: the acks wait for these
		select {
		case rn.items <- it:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	rn.issued++
	return nil
}

func (rn *runner) pipelineErr() error {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	return rn.ackErr
}

// drain waits until every issued item is acknowledged and deleted from
// the DLQ (or the pipeline failed).
func (rn *runner) drain(ctx context.Context) error {
	for {
		rn.pub.flush()
		rn.del.flushNow()
		rn.mu.Lock()
		done, err := rn.p.Next >= rn.issued, rn.ackErr
		rn.mu.Unlock()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// drainThen lets the acks in flight land (so the final progress counts
// them), then returns err; with err nil (a person paused or cancelled),
// it writes the final progress and releases the DLQ.
func (rn *runner) drainThen(ctx context.Context, err error) error {
	if derr := rn.drain(ctx); err == nil && derr != nil {
		err = derr
	}
	if err == nil || errors.Is(err, errFenced) {
		if err == nil {
			stop, cerr := rn.checkpoint(ctx, nil, true)
			if cerr == nil && !stop {
				cerr = errors.New("redrive: run halted while its record still says running")
			}
			if cerr != nil {
				return rn.stopped(ctx, cerr)
			}
		}
		return rn.stopped(ctx, err)
	}
	return err
}

// window is how long the outcome of the sample (and of the run) is
// watched: none when nothing can be observed, or neither a sample nor a
// window was asked for.
func (rn *runner) window() time.Duration {
	r := rn.rec
	if r.WatchDLQ == "" || (r.SampleSize == 0 && r.SampleWindow == 0) {
		return 0
	}
	return sampleWindow(r.Request)
}

// failing reports whether the failure rate since the last (re)start is
// above the threshold.
func (rn *runner) failing() bool {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	rn.p.Refailed, rn.p.FirstRefailure = rn.w.counts(rn.p.FirstRefailure)
	// Sent counts what is also deleted from the DLQ, up to a second
	// behind the acks (deleter.go); the rate is of what was published.
	sent := max(rn.p.Sent, rn.sentAtStart+int(rn.acked.Load())) - rn.p.BaseSent
	failed := rn.p.Refailed - rn.p.BaseRefailed
	return sent > 0 && failed > 0 && float64(failed) > rn.maxFail*float64(sent)
}

// account adds the time since the last call to the sending time if the
// run was sending.
func (rn *runner) account() {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	now := time.Now()
	if rn.p.Phase == PhaseSample || rn.p.Phase == PhaseMain {
		rn.p.Sending += now.Sub(rn.segStart)
	}
	rn.segStart = now
}

// errNoWrite: a checkpoint found the run stopped and wrote nothing.
var errNoWrite = errors.New("redrive: run stopped; progress not written")

// checkpoint writes the progress, fenced by the epoch, and applies
// mutate while the run is still running. stop is true when a person
// paused or cancelled it. A checkpoint that is not final writes nothing
// then (the run drains its publishes first, then writes its final
// progress, so the first write after a pause is the drained one that
// Pause waits for); a final one writes the progress whatever the state.
func (rn *runner) checkpoint(ctx context.Context, mutate func(r *Redrive), final bool) (stop bool, err error) {
	s := rn.s
	rn.ckMu.Lock()
	defer rn.ckMu.Unlock()
	rn.account()
	rn.mu.Lock()
	rn.p.Refailed, rn.p.FirstRefailure = rn.w.counts(rn.p.FirstRefailure)
	rn.p.UpdatedAt = time.Now().UTC()
	p := rn.p
	rn.mu.Unlock()
	r, _, err := s.update(ctx, rn.id, func(r *Redrive) error {
		if r.Epoch != rn.epoch || r.Runner != s.cfg.Instance {
			return errFenced
		}
		if r.State != StateRunning {
			stop = true
			if !final {
				return errNoWrite
			}
			if p.FinishedAt.IsZero() {
				p.FinishedAt = r.Progress.FinishedAt // set by Cancel
			}
			r.Progress = p
			return nil
		}
		r.Progress = p
		if mutate != nil {
			mutate(r)
		}
		return nil
	})
	if errors.Is(err, errNoWrite) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	rn.rec, rn.lastCk = r, time.Now()
	return stop, nil
}

// stopped ends the run after a checkpoint said stop (or failed).
func (rn *runner) stopped(ctx context.Context, err error) error {
	rn.flushLinks(ctx, true)
	if err == nil {
		rn.s.unlock(ctx, rn.dlqName, rn.id)
	}
	return err
}

func (rn *runner) stopWith(ctx context.Context, to State, actor, reason string) {
	ctx = context.WithoutCancel(ctx)
	_, err := rn.checkpoint(ctx, func(r *Redrive) {
		r.step(actor, to, reason)
		if to == StatePaused {
			r.PauseReason = reason
		}
		if to.Terminal() {
			r.Progress.FinishedAt = time.Now().UTC()
		}
	}, true)
	rn.flushLinks(ctx, true)
	if err != nil {
		return
	}
	rn.mu.Lock()
	p := rn.p
	rn.mu.Unlock()
	action := ActionPause
	switch to {
	case StateCompleted:
		action = ActionComplete
	case StateFailed:
		action = ActionFail
	}
	rn.s.auditf(ctx, AuditRecord{Actor: actor, Action: action, Target: rn.id, Detail: reason, After: map[string]any{
		"state": rn.rec.State, "dlq": rn.rec.Object, "sent": p.Sent, "skipped": p.Skipped, "refailed": p.Refailed,
		"total": rn.rec.Total, "next": p.Next, "sending": p.Sending.String()}})
	rn.s.unlock(ctx, rn.rec.DLQStream, rn.id)
}

func (rn *runner) canaryPause(ctx context.Context) error {
	p := rn.p
	sent, failed := p.Sent-p.BaseSent, p.Refailed-p.BaseRefailed
	what := "redriven events"
	if p.Phase == PhaseSampleWait {
		what = "sampled events"
	}
	reason := fmt.Sprintf("canary: %d of %d %s reached DLQ %s again (%.1f%%, above the %.1f%% allowed); first failure: %s",
		failed, sent, what, rn.rec.WatchDLQ, 100*float64(failed)/float64(sent), 100*rn.rec.MaxFailureRate, orNone(p.FirstRefailure))
	rn.stopWith(ctx, StatePaused, canaryActor, reason)
	return nil
}

func (rn *runner) complete(ctx context.Context) error {
	rn.p.Phase = PhaseDone
	rn.p.FinishedAt = time.Now().UTC()
	p := rn.p
	reason := fmt.Sprintf("%d sent, %d skipped (gone from the DLQ)", p.Sent, p.Skipped)
	if rn.rec.WatchDLQ != "" {
		reason += fmt.Sprintf(", %d failed again within %s", p.Refailed, rn.window())
	}
	rn.stopWith(ctx, StateCompleted, rn.s.cfg.Instance, reason)
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// kickAudit has the settled links written to the audit log in the
// background (full records only; the run writes the rest when it stops).
func (rn *runner) kickAudit() {
	select {
	case rn.audit <- struct{}{}:
	default:
	}
}

// flushLinks appends the links gathered so far to the audit log, in
// records of at most AuditBatch links (all if force). A goroutine of the
// run calls it as links settle (kickAudit: off the sending and deleting
// paths), the run when it stops; flushMu keeps the records in order.
func (rn *runner) flushLinks(ctx context.Context, force bool) {
	rn.flushMu.Lock()
	defer rn.flushMu.Unlock()
	n := rn.s.cfg.AuditBatch
	for {
		rn.mu.Lock()
		if len(rn.links) < n && (!force || len(rn.links) == 0) {
			rn.mu.Unlock()
			return
		}
		k := min(n, len(rn.links))
		batch := rn.links[:k:k]
		rn.links = rn.links[k:]
		rn.mu.Unlock()
		var after any = batch
		if c, ok := compactLinks(rn.id, batch); ok {
			after = c
		}
		rn.s.auditf(ctx, AuditRecord{Actor: rn.s.cfg.Instance, Action: ActionSent, Target: rn.id, After: after,
			Detail: fmt.Sprintf("%d events redriven from DLQ %s (entries %d..%d) as redrive:%s:<dlq seq>", k, rn.dlqName, batch[0].DLQSeq, batch[k-1].DLQSeq, rn.id)})
	}
}
