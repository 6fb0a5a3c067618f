package outboxrelay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/msgplatform/platform/internal/kvlease"
)

// The relay's publishing pipeline, run for one lease term (one fencing
// token). Three things overlap instead of running in turn:
//
//   - a reader fetches the next unsent records while earlier ones are
//     published, skipping those already in the pipeline (Store.Unsent);
//   - the scheduler publishes async: the head of every key whose previous
//     record was acked, up to MaxInFlight publishes awaiting an ack;
//   - a marker marks the acked records sent, one batch while the next acks
//     accumulate.
//
// Ordering: a key's records sit in the pipeline in Seq order (a read only
// adds records above the ones of that key it already holds: the store
// never shows a record while a lower Seq of its key may still commit, and
// a record leaves the pipeline only once marked sent). Only a key's head
// is ever published, and the head is dropped only once acked, so the next
// record of a key is published after the previous one is stored, and a
// failed head is retried (same Nats-Msg-Id) before anything behind it.
//
// A key whose publish fails waits for its own backoff (exponential, full
// jitter) while the other keys go on; its records stay ("parked") so reads
// skip them, and do not count against the read window, so up to maxParked
// unpublishable records (a missing topic) do not starve healthy keys.

// pipeline is the state of one lease term; only run's goroutine touches it.
type pipeline struct {
	r   *Relay
	l   *kvlease.Lease
	tok uint64

	inflight map[uint64]struct{} // read and not yet marked sent
	keys     map[string]*keyState
	ready    []*keyState // keys whose head can be published now
	waiting  []*keyState // keys backing off after a failed publish
	parked   int         // records of waiting keys
	pending  int         // publishes awaiting an ack
	held     int         // records in keys (read, not yet acked)

	reading     bool
	readLimit   int  // of the read in progress
	firstRead   bool // the term's first read is in progress or not yet taken
	batchWake   time.Time
	nextRead    time.Time
	readBackoff time.Duration

	marking     bool
	toMark      []Record
	toMarkSince time.Time // when the oldest record of toMark was acked
	nextMark    time.Time
	markBackoff time.Duration

	lastWarn time.Time
	failures int // publish failures since lastWarn
}

type keyState struct {
	id      string
	recs    []Record // unmarked, unacked records of the key in Seq order
	busy    bool     // recs[0] is published, awaiting its ack
	queued  bool     // in ready
	backoff time.Duration
	retryAt time.Time
	// singleThrough: records up to this Seq go by single publishes (a
	// term's first read, retries), not in a fast batch (fastbatch.go).
	singleThrough uint64
}

type ackResult struct {
	k   *keyState
	rec Record
	ack Ack
	err error
	out string
	// retry: not stored (a fast batch ended before it, or no word in
	// time); published again at once by a single publish. out, if set,
	// is counted.
	retry bool
}

type readResult struct {
	recs []Record
	err  error
}

type markResult struct {
	recs   []Record
	err    error
	killed bool
}

// errLeaseLost ends a pipeline whose lease is no longer valid.
var errLeaseLost = errors.New("outboxrelay: lease no longer valid")

func (r *Relay) maxParked() int { return min(10*r.cfg.BatchSize, 100000) }

// firstRead starts a term's first read (one window, nothing to skip yet)
// and returns where its result arrives.
func (r *Relay) firstRead(ctx context.Context) <-chan readResult {
	first := make(chan readResult, 1)
	go func() {
		recs, err := r.store.Unsent(ctx, r.firstReadLimit(), nil)
		first <- readResult{recs: recs, err: err}
	}()
	return first
}

func (r *Relay) firstReadLimit() int { return min(r.cfg.BatchSize, r.cfg.MaxInFlight) }

// runPipeline publishes under token tok until ctx ends, the lease is lost,
// the store fences the token (ErrFenced) or a fault kills the relay. first
// delivers the term's first read (firstRead), started before the fence.
func (r *Relay) runPipeline(ctx context.Context, l *kvlease.Lease, tok uint64, first <-chan readResult) error {
	p := &pipeline{
		r: r, l: l, tok: tok,
		inflight:    map[uint64]struct{}{},
		keys:        map[string]*keyState{},
		readBackoff: r.cfg.BackoffMin,
		markBackoff: r.cfg.BackoffMin,
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Every publish awaiting its outcome counts in p.pending (at most
	// MaxInFlight) and reports once, so sends on acks never block.
	acks := make(chan ackResult, r.cfg.MaxInFlight)
	reads := make(chan readResult, 1)
	marks := make(chan markResult, 1)
	p.reading, p.readLimit, p.firstRead = true, r.firstReadLimit(), true
	go func() {
		select {
		case res := <-first:
			reads <- res
		case <-pctx.Done():
			reads <- readResult{err: pctx.Err()}
		}
	}()

	stop := func(cause error) error {
		cancel()
		r.pub.forget(acks) // no outcome is reported on acks after this
		r.batch.forget(acks)
		if p.reading {
			<-reads
		}
		if p.marking {
			if res := <-marks; res.killed {
				return res.err
			}
			p.markDone(markResult{}) // the outcome does not matter any more
		}
		if r.isKilled() {
			return cause
		}
		// Acks that arrived are marked, so a clean stop leaves few repeats.
		for drained := false; !drained; {
			select {
			case a := <-acks:
				p.acked(a)
			default:
				drained = true
			}
		}
		if len(p.toMark) > 0 {
			mctx, mcancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.AckTimeout)
			res := r.mark(mctx, tok, p.toMark)
			mcancel()
			if res.killed {
				return res.err
			}
			if res.err != nil && !errors.Is(res.err, ErrFenced) {
				r.log.Warn("outboxrelay: mark sent on stop", "err", res.err)
			}
		}
		return cause
	}

	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		if err := pctx.Err(); err != nil {
			return stop(err)
		}
		if l.Token() != tok {
			return stop(errLeaseLost)
		}
		now := time.Now()
		p.wake(now)
		p.startRead(pctx, now, reads)
		p.publish(acks)
		p.batchWake = r.batch.tick(now, acks, p.pending >= r.cfg.MaxInFlight)
		p.startMark(pctx, now, marks)

		timer.Reset(p.nextWake(now))
		select {
		case <-pctx.Done():
		case <-timer.C:
		case a := <-acks:
			p.acked(a)
			for more := true; more; { // take every ack already there
				select {
				case a := <-acks:
					p.acked(a)
				default:
					more = false
				}
			}
		case res := <-reads:
			p.readDone(res)
		case res := <-marks:
			if res.killed {
				cancel()
				r.pub.forget(acks)
				r.batch.forget(acks)
				if p.reading {
					<-reads
				}
				return res.err
			}
			if errors.Is(res.err, ErrFenced) {
				l.Drop()
				p.markDone(res)
				return stop(res.err)
			}
			p.markDone(res)
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// nextWake is how long the scheduler may sleep with nothing arriving.
func (p *pipeline) nextWake(now time.Time) time.Duration {
	d := min(p.r.cfg.LeaseTTL/8, 250*time.Millisecond) // lease checks
	if p.canRead() {
		d = min(d, p.nextRead.Sub(now))
	}
	if !p.marking && len(p.toMark) > 0 {
		d = min(d, max(p.nextMark.Sub(now), p.toMarkSince.Add(markLinger).Sub(now)))
	}
	for _, k := range p.waiting {
		d = min(d, k.retryAt.Sub(now))
	}
	if !p.batchWake.IsZero() {
		d = min(d, p.batchWake.Sub(now))
	}
	return max(d, time.Millisecond)
}

// maxPollStretch bounds the poll interval stretched by records held.
const maxPollStretch = 250 * time.Millisecond

func (p *pipeline) canRead() bool {
	active := len(p.inflight) - p.parked
	return !p.reading && active < 2*p.r.cfg.BatchSize && p.parked < p.r.maxParked()
}

func (p *pipeline) startRead(ctx context.Context, now time.Time, reads chan<- readResult) {
	if !p.canRead() || now.Before(p.nextRead) {
		return
	}
	p.reading = true
	skip := make([]uint64, 0, len(p.inflight))
	for seq := range p.inflight {
		skip = append(skip, seq)
	}
	slices.Sort(skip)
	// A read returns at most as many records as the pipeline already
	// holds, and at least one window (MaxInFlight): a backlog's reads grow
	// 1, 1, 2, 4... windows up to BatchSize. A read of a large BatchSize
	// can take longer than acking one window, so a full-size read right
	// after the first window would leave the window empty until it
	// returned; a read no larger than what is being published returns
	// before that runs out.
	limit := min(p.r.cfg.BatchSize, max(p.r.cfg.MaxInFlight, len(p.inflight)-p.parked))
	p.readLimit = limit
	go func() {
		recs, err := p.r.store.Unsent(ctx, limit, skip)
		reads <- readResult{recs: recs, err: err}
	}()
}

func (p *pipeline) readDone(res readResult) {
	p.reading = false
	now := time.Now()
	if res.err != nil {
		if !errors.Is(res.err, context.Canceled) {
			p.r.log.Warn("outboxrelay: read unsent", "err", res.err, "backoff", p.readBackoff)
		}
		p.nextRead = now.Add(jitter(p.readBackoff))
		p.readBackoff = min(p.readBackoff*2, p.r.cfg.BackoffMax)
		return
	}
	p.readBackoff = p.r.cfg.BackoffMin
	if len(res.recs) < p.readLimit {
		// Caught up: poll again after PollInterval, stretched by one
		// PollInterval per publish window of records in the pipeline, up
		// to maxPollStretch. A read costs in proportion to its skip list,
		// so frequent empty reads at the end of a backlog would load the
		// database (and the brokers on a shared host) for nothing: those
		// records take one ack round trip per window to publish anyway. A
		// pipeline holding less than a window (steady traffic) polls every
		// PollInterval.
		stretch := time.Duration(1 + len(p.inflight)/p.r.cfg.MaxInFlight)
		p.nextRead = now.Add(min(p.r.cfg.PollInterval*stretch, max(p.r.cfg.PollInterval, maxPollStretch)))
	}
	first := p.firstRead
	p.firstRead = false
	for _, rec := range res.recs {
		if _, dup := p.inflight[rec.Seq]; dup {
			continue
		}
		p.inflight[rec.Seq] = struct{}{}
		id := rec.Topic + "\x00" + rec.Key
		k := p.keys[id]
		if k == nil {
			k = &keyState{id: id, backoff: p.r.cfg.BackoffMin}
			p.keys[id] = k
		}
		k.recs = append(k.recs, rec)
		p.held++
		if first {
			// Most likely what a previous holder published and did not
			// mark: single publishes report its duplicates.
			k.singleThrough = rec.Seq
		}
		if !k.retryAt.IsZero() {
			p.parked++
			continue
		}
		if !k.busy && !k.queued {
			k.queued = true
			p.ready = append(p.ready, k)
		}
	}
}

// wake moves the keys whose backoff has passed back to ready.
func (p *pipeline) wake(now time.Time) {
	if len(p.waiting) == 0 {
		return
	}
	still := p.waiting[:0]
	for _, k := range p.waiting {
		if now.Before(k.retryAt) {
			still = append(still, k)
			continue
		}
		k.retryAt = time.Time{}
		p.parked -= len(k.recs)
		k.queued = true
		p.ready = append(p.ready, k)
	}
	clear(p.waiting[len(still):])
	p.waiting = still
}

// publish sends the head of ready keys while fewer than MaxInFlight
// publishes await their outcome, which is reported on acks.
func (p *pipeline) publish(acks chan<- ackResult) {
	n := 0
	for ; n < len(p.ready) && p.pending < p.r.cfg.MaxInFlight; n++ {
		k := p.ready[n]
		k.queued = false
		if k.busy || len(k.recs) == 0 {
			continue
		}
		k.busy = true
		p.pending++
		// The backlog: records read and not yet published (parked ones
		// excluded), this one included. Keys of a backlog are acked one
		// by one when published singly, so the number ready at once
		// understates it.
		p.r.publish(k, p.held-p.parked-p.pending+1, acks)
	}
	rest := copy(p.ready, p.ready[n:])
	clear(p.ready[rest:])
	p.ready = p.ready[:rest]
}

// acked handles one publish outcome.
func (p *pipeline) acked(a ackResult) {
	p.pending--
	k := a.k
	k.busy = false
	if a.out != "" {
		p.r.m.count(a.out)
	}
	if a.retry {
		k.singleThrough = max(k.singleThrough, a.rec.Seq)
		if !k.queued {
			k.queued = true
			p.ready = append(p.ready, k)
		}
		return
	}
	if a.err != nil {
		k.singleThrough = max(k.singleThrough, a.rec.Seq)
		p.failures++
		if now := time.Now(); now.Sub(p.lastWarn) >= 5*time.Second {
			p.r.log.Warn("outboxrelay: publish failed, the key backs off", "err", a.err, "failures", p.failures, "key_backoff", k.backoff)
			p.lastWarn, p.failures = now, 0
		}
		k.retryAt = time.Now().Add(jitter(k.backoff))
		k.backoff = min(k.backoff*2, p.r.cfg.BackoffMax)
		p.parked += len(k.recs)
		p.waiting = append(p.waiting, k)
		return
	}
	if p.r.cfg.OnAck != nil {
		p.r.cfg.OnAck(a.rec, a.ack)
	}
	if len(p.toMark) == 0 {
		p.toMarkSince = time.Now()
	}
	p.toMark = append(p.toMark, a.rec)
	k.backoff = p.r.cfg.BackoffMin
	k.recs[0] = Record{}
	k.recs = k.recs[1:]
	p.held--
	if len(k.recs) == 0 {
		delete(p.keys, k.id)
		return
	}
	if !k.queued {
		k.queued = true
		p.ready = append(p.ready, k)
	}
}

// markLinger is how long acked records may wait for more before a mark
// starts with fewer than markMin of them: acks arrive one by one, and a
// mark per ack would cost the store a transaction each (a PostgreSQL round
// trip and commit). The wait only delays the bookkeeping, not a publish;
// a crash in it repeats at most those records (deduplicated like any
// republish).
const markLinger = 10 * time.Millisecond

func (p *pipeline) markMin() int { return max(1, min(p.r.cfg.MaxInFlight, p.r.cfg.BatchSize)/4) }

func (p *pipeline) startMark(ctx context.Context, now time.Time, marks chan<- markResult) {
	if p.marking || len(p.toMark) == 0 || now.Before(p.nextMark) {
		return
	}
	if len(p.toMark) < p.markMin() && now.Sub(p.toMarkSince) < markLinger {
		return
	}
	p.marking = true
	recs := p.toMark
	p.toMark = nil
	tok := p.tok
	go func() { marks <- p.r.mark(context.WithoutCancel(ctx), tok, recs) }()
}

func (p *pipeline) markDone(res markResult) {
	p.marking = false
	if res.err != nil {
		if !errors.Is(res.err, ErrFenced) {
			p.r.log.Warn("outboxrelay: mark sent", "err", res.err, "backoff", p.markBackoff)
		}
		// Keep them in the pipeline (not republished) and mark them later.
		p.toMark = append(res.recs, p.toMark...)
		p.nextMark = time.Now().Add(jitter(p.markBackoff))
		p.markBackoff = min(p.markBackoff*2, p.r.cfg.BackoffMax)
		return
	}
	p.markBackoff = p.r.cfg.BackoffMin
	for _, rec := range res.recs {
		delete(p.inflight, rec.Seq)
	}
}

// mark runs the AfterPublish fault hook, then marks recs sent.
func (r *Relay) mark(ctx context.Context, tok uint64, recs []Record) markResult {
	if h := r.cfg.Faults.AfterPublish; h != nil {
		if err := h(recs); err != nil {
			err = fmt.Errorf("%w: after publish, before mark: %w", ErrInjectedFault, err)
			r.kill(err)
			return markResult{recs: recs, err: err, killed: true}
		}
	}
	seqs := make([]uint64, len(recs))
	for i, rec := range recs {
		seqs[i] = rec.Seq
	}
	mctx, cancel := context.WithTimeout(ctx, max(r.cfg.AckTimeout, 10*time.Second))
	defer cancel()
	return markResult{recs: recs, err: r.store.MarkSent(mctx, tok, seqs)}
}
