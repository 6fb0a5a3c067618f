package consumer

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/parallel"
	"github.com/msgplatform/platform/internal/retry"
	"github.com/msgplatform/platform/internal/tick"
	"github.com/msgplatform/platform/platform"
)

// partitionRunner consumes one partition for its owning member. Events of
// one key run one at a time, in stream order; different keys run
// concurrently (bounded by the member's MaxConcurrency).
//
// Failing key policy: PARK THE KEY. A transient failure naks the event
// with a delay (the broker redelivers it and counts the attempt) and parks
// its key: later events of that key wait in the runner (their lease kept
// alive with InProgress) until the parked event succeeds or is
// dead-lettered; every other key proceeds. A parked key holds at most
// MaxBuffered events of its partition in memory: beyond that the
// partition stops fetching (back-pressure, not loss).
type partitionRunner struct {
	m     *Member
	p     int
	fence uint64
	cons  jetstream.Consumer
	set   *settler
	admit Handler // the chain down to the key's lane (enqueue)
	chain Handler // the chain from the lane down to the handler

	fetchCtx    context.Context // cancelled to stop fetching
	stopFetch   context.CancelFunc
	handlerCtx  context.Context // cancelled when handlers must stop
	stopHandler context.CancelFunc

	mu       sync.Mutex
	lanes    map[string]*lane
	buffered int
	stopping bool
	space    chan struct{}

	released atomic.Bool // fenced: settle nothing more
	wg       sync.WaitGroup
	loopDone chan struct{}

	// The run loop's own (see inSequence): the consumer sequence the next
	// delivery must have (0: take the next as it comes), and whether a
	// delivery was lost since the last reset.
	nextDelivery uint64
	lost         bool
}

// lane is the events of one key held by the runner.
type lane struct {
	current jetstream.Msg   // running, nil if none
	parked  uint64          // stream seq of a nak'd event awaited back, 0 if none
	queue   []jetstream.Msg // waiting, in stream order
}

func newPartitionRunner(m *Member, p int, fence uint64, c jetstream.Consumer) *partitionRunner {
	info := c.CachedInfo()
	r := &partitionRunner{
		m: m, p: p, fence: fence, cons: c,
		lanes: map[string]*lane{}, space: make(chan struct{}, 1), loopDone: make(chan struct{}),
	}
	r.set = newSettler(m.js, m.topic.Name, info.Name, m.cfg.Group, m.cfg.Retry, info.Config.MaxDeliver,
		m.budget, m.cfg.Metrics, itoa(p), r.fenced)
	r.set.failures = m.failures
	admit, run := r.set.compose(r.slot, m.cfg.Middleware, m.handler)
	r.admit, r.chain = admit(r.enqueue), run
	r.fetchCtx, r.stopFetch = context.WithCancel(context.Background())
	r.handlerCtx, r.stopHandler = context.WithCancel(context.Background())
	return r
}

func (r *partitionRunner) fenced() bool { return r.released.Load() || !r.m.leaseValid() }

func (r *partitionRunner) run() {
	defer close(r.loopDone)
	ackWait := r.cons.CachedInfo().Config.AckWait
	if ackWait <= 0 {
		ackWait = 30 * time.Second
	}
	go r.keepAlive(ackWait / 3)
	idle := 0 // consecutive fetches that got nothing
	for r.fetchCtx.Err() == nil {
		if r.fenced() {
			// The member could not renew its membership: another member
			// may own the partition now, so do not pull (and take the pin).
			retry.Sleep(r.fetchCtx, 100*time.Millisecond)
			continue
		}
		if r.lost {
			// Pull nothing more until what the runner holds has run,
			// then reset the consumer (see inSequence).
			if r.running() {
				select {
				case <-r.space:
				case <-r.fetchCtx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			} else {
				r.resync()
			}
			continue
		}
		r.mu.Lock()
		n := min(r.m.cfg.MaxBuffered-r.buffered, 100)
		r.mu.Unlock()
		if n <= 0 {
			select {
			case <-r.space:
			case <-r.fetchCtx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		// Read until the server ends the request (readBatch), even when
		// released meanwhile: a request abandoned by the client before the
		// server expires it can still receive an event while the next
		// pull gets the key's later events. A release thus waits for the
		// request's end (at most fetchWait; what arrives while stopping
		// is queued, never run, and delivered again by the next owner's
		// reset), and no request of this runner outlives it to take the
		// next owner's pin.
		batch, err := r.cons.Fetch(n, jetstream.FetchMaxWait(fetchWait), jetstream.FetchPriorityGroup(r.m.cfg.Group))
		if err != nil {
			r.m.log.Debug("platform: fetch", "partition", r.p, "err", err)
			retry.Sleep(r.fetchCtx, 100*time.Millisecond)
			continue
		}
		got := readBatch(nil, batch, r.dispatch)
		if err := batch.Error(); !isFetchIdle(err) {
			r.m.log.Debug("platform: fetch", "partition", r.p, "err", err)
			retry.Sleep(r.fetchCtx, 100*time.Millisecond)
		}
		if idle = idle + 1; got > 0 {
			idle = 0
		}
		if idle >= stalledFetches {
			idle = 0
			r.unstick()
		}
	}
}

// fetchWait is how long one pull request of a partition runner waits for
// events at the server.
const fetchWait = 500 * time.Millisecond

// stalledFetches is how many empty fetches in a row (3 s of them) make
// the runner check that the partition is not pinned to a pull request
// nobody serves.
const stalledFetches = 6

// unstick takes the partition over again when the broker holds events for
// it that the runner neither holds nor receives: the pin went to a stale
// pull request. Measured on nats-server 2.15.2 (R3, many handovers at
// once): a pull request of the previous owner still waiting at the server
// when the new owner unpins can take the pin (and a batch of events,
// delivered to an inbox nobody reads); every pull of the new owner then
// waits until PinnedTTL (2 min) and the stranded events until AckWait. It
// unpins and resets the consumer to its ack floor, as acquire does, so the
// stranded events come again in stream order before anything newer. Only
// when the runner holds nothing (no running, queued or parked event), so
// no backoff is cut short and no delivery count restarted under a retry.
func (r *partitionRunner) unstick() {
	r.mu.Lock()
	holds := len(r.lanes) > 0
	r.mu.Unlock()
	if holds || r.fenced() {
		return
	}
	ctx, cancel := context.WithTimeout(r.fetchCtx, 5*time.Second)
	defer cancel()
	info, err := r.cons.Info(ctx)
	if err != nil || (info.NumPending == 0 && info.NumAckPending == 0) {
		return
	}
	stream := platform.StreamName(r.m.topic.Name)
	s, err := r.m.js.Stream(ctx, stream)
	if err != nil {
		return
	}
	if err := s.UnpinConsumer(ctx, info.Name, r.m.cfg.Group); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		r.m.log.Debug("platform: unpin stalled partition", "partition", r.p, "err", err)
	}
	if r.fenced() {
		return
	}
	if _, err := r.m.js.ResetConsumer(ctx, stream, info.Name); err != nil {
		r.m.log.Warn("platform: reset stalled partition", "partition", r.p, "err", err)
		return
	}
	r.m.log.Warn("platform: partition stalled behind a stale pin; unpinned and reset to its ack floor",
		"partition", r.p, "pending", info.NumPending, "ack_pending", info.NumAckPending)
}

// inSequence checks a delivery's consumer sequence (dseq). While the
// runner holds the consumer's pin every delivery comes to it, one after
// the other, so a jump means a delivery went to a pull request nobody
// reads any more: nats.go gives up on a fetch one second after its
// expiry if the server has not ended it, and a request that reached the
// server late is still served (seen once in a race-detector run of the
// whole suite under extra load: good-2 handled before good-1, a key's
// order broken). That event would wait out AckWait (30 s) while the
// key's later events ran. From a jump on, the runner takes no new event
// (inSequence false; redeliveries of what it holds still run), lets what
// it holds run, then resets the consumer to its ack floor (resync), so
// the lost delivery and everything after it come again in stream order.
// A lower sequence follows a reset (this runner's, or a new owner's):
// the count starts again there.
func (r *partitionRunner) inSequence(dseq uint64) bool {
	switch {
	case r.lost:
		return false
	case r.nextDelivery == 0 || dseq <= r.nextDelivery:
		r.nextDelivery = dseq + 1
		return true
	default:
		r.lost = true
		r.m.log.Warn("platform: a delivery of the partition went to an abandoned pull request; holding new events until the consumer is reset to its ack floor",
			"partition", r.p, "want_delivery", r.nextDelivery, "got_delivery", dseq)
		return false
	}
}

// running reports whether a handler of the runner runs. Events queued
// behind a running one start as it ends; those behind a parked one (nak'd
// and awaited back) wait for a redelivery that needs pulls, which the
// runner makes no more after a lost delivery, so the reset brings them,
// and the parked one, again.
func (r *partitionRunner) running() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range r.lanes {
		if l.current != nil {
			return true
		}
	}
	return false
}

// held reports whether the event at stream seq seq of key is one the
// runner holds (running, queued or parked): a redelivery of it.
func (r *partitionRunner) held(key string, seq uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.lanes[key]
	if l == nil {
		return false
	}
	if l.parked == seq || (l.current != nil && seqOf(l.current) == seq) {
		return true
	}
	for _, q := range l.queue {
		if seqOf(q) == seq {
			return true
		}
	}
	return false
}

// resync resets the consumer to its ack floor after a lost delivery (see
// inSequence), once no handler runs: the server ignores an ack of an
// event the reset has not delivered again yet. A parked event comes
// again at once (its backoff cut short, and the reset restarts its
// delivery count): a rare cost next to holding the partition until its
// backoff ends.
func (r *partitionRunner) resync() {
	ctx, cancel := context.WithTimeout(r.fetchCtx, 5*time.Second)
	defer cancel()
	if r.fenced() {
		return
	}
	name := r.cons.CachedInfo().Name
	if _, err := r.m.js.ResetConsumer(ctx, platform.StreamName(r.m.topic.Name), name); err != nil {
		r.m.log.Warn("platform: reset after a lost delivery", "partition", r.p, "err", err)
		retry.Sleep(r.fetchCtx, 250*time.Millisecond)
		return
	}
	r.lost, r.nextDelivery = false, 0
	r.m.cfg.Metrics.resynced(r.m.cfg.Group, itoa(r.p))
	r.m.log.Warn("platform: partition reset to its ack floor after a lost delivery", "partition", r.p)
}

// keepAlive renews the lease of every event the runner holds.
func (r *partitionRunner) keepAlive(every time.Duration) {
	tick.Repeat(r.handlerCtx, every, nil, func(bool) bool {
		if r.fenced() {
			return true
		}
		r.mu.Lock()
		var held []jetstream.Msg
		for _, l := range r.lanes {
			if l.current != nil {
				held = append(held, l.current)
			}
			held = append(held, l.queue...)
		}
		r.mu.Unlock()
		for _, m := range held {
			_ = m.InProgress()
		}
		return true
	})
}

func (r *partitionRunner) dispatch(msg jetstream.Msg) {
	meta, err := msg.Metadata()
	if err != nil {
		return
	}
	seq := meta.Sequence.Stream
	key, _, ok := platform.KeyOf(r.m.topic.Name, msg.Subject())
	if !ok {
		key = msg.Subject()
	}
	if !r.inSequence(meta.Sequence.Consumer) && !r.held(key, seq) {
		return // after a lost delivery: it comes again with the reset
	}
	_ = r.admit(r.handlerCtx, r.message(msg, meta, key))
}

// message is the delivery of raw to the handler.
func (r *partitionRunner) message(raw jetstream.Msg, meta *jetstream.MsgMetadata, key string) *Message {
	m := newMessage(raw, meta, r.fence)
	m.Key, m.Partition = key, r.p
	return m
}

// enqueue is where the chain waits for the key's lane: m runs (r.chain)
// at once if its key has nothing running, parked or queued, else after
// what is ahead of it.
func (r *partitionRunner) enqueue(_ context.Context, m *Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.lanes[m.Key]
	if l == nil {
		l = &lane{}
		r.lanes[m.Key] = l
	}
	switch seq := m.Seq; {
	case l.parked == seq:
		l.parked = 0
		r.buffered++
		r.start(l, m)
	case l.current != nil && seqOf(l.current) == seq:
		// A redelivery of the running event (its lease lapsed): the
		// running handler settles it.
	case replaceQueued(l, seq, m.raw):
	case l.current != nil || l.parked != 0 || len(l.queue) > 0 || r.stopping:
		r.buffered++
		l.queue = append(l.queue, m.raw)
	default:
		r.buffered++
		r.start(l, m)
	}
	return nil
}

func seqOf(m jetstream.Msg) uint64 {
	meta, err := m.Metadata()
	if err != nil {
		return 0
	}
	return meta.Sequence.Stream
}

func replaceQueued(l *lane, seq uint64, msg jetstream.Msg) bool {
	for i, q := range l.queue {
		if seqOf(q) == seq {
			l.queue[i] = msg
			return true
		}
	}
	return false
}

// start runs the chain for m. r.mu is held.
func (r *partitionRunner) start(l *lane, m *Message) {
	l.current = m.raw
	r.wg.Add(1)
	go r.handle(l, m)
}

// slot is the member's step around the handler: it waits for one of
// MaxConcurrency slots, or, if the partition is released first, settles
// nothing.
func (r *partitionRunner) slot(next Handler) Handler {
	return func(ctx context.Context, m *Message) error {
		select {
		case r.m.sem <- struct{}{}:
		case <-ctx.Done():
			m.outcome = outcomeFenced
			return ctx.Err()
		}
		err := next(ctx, m)
		<-r.m.sem
		return err
	}
}

func (r *partitionRunner) handle(l *lane, m *Message) {
	defer r.wg.Done()
	_ = r.chain(r.handlerCtx, m)
	res := m.outcome
	if res == outcomePending {
		res = outcomeFenced // settled by nothing
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	l.current = nil
	r.buffered--
	if res == outcomeRetry {
		l.parked = m.Seq
	}
	if res != outcomeFenced && l.parked == 0 && len(l.queue) > 0 && !r.stopping {
		next := l.queue[0]
		l.queue = l.queue[1:]
		if nm, err := next.Metadata(); err == nil {
			r.start(l, r.message(next, nm, m.Key))
		} else {
			r.buffered--
		}
	}
	if l.current == nil && l.parked == 0 && len(l.queue) == 0 {
		delete(r.lanes, m.Key)
	}
	tick.Signal(r.space)
}

// release stops fetching, lets running handlers finish and settle within
// drain, then fences the runner: nothing it still holds is settled (the
// next owner's reset delivers it again).
func (r *partitionRunner) release(drain time.Duration) {
	r.mu.Lock()
	r.stopping = true
	r.mu.Unlock()
	r.stopFetch()
	<-r.loopDone
	select {
	case <-parallel.Done(&r.wg):
	case <-time.After(max(drain, 0)):
	}
	r.released.Store(true)
	r.stopHandler()
}

// releaseAll releases runners at once: each waits for its pull request
// to end and its handlers to drain, so one after the other would add
// those waits up.
func releaseAll(runners []*partitionRunner, drain time.Duration) {
	var wg sync.WaitGroup
	for _, r := range runners {
		wg.Go(func() { r.release(drain) })
	}
	wg.Wait()
}

// abandon stops the runner as a crash would: nothing more is settled.
func (r *partitionRunner) abandon() {
	r.released.Store(true)
	r.stopFetch()
	r.stopHandler()
}
