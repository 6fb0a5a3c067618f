package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/parallel"
	"github.com/msgplatform/platform/internal/retry"
	"github.com/msgplatform/platform/internal/tick"
	"github.com/msgplatform/platform/platform"
)

// RouterConsumer is the durable consumer of a DLQ events stream that
// DLQ routers share (competing: each advisory is handled by one of them).
const RouterConsumer = "dlq-router"

// Router turns the captured MAX_DELIVERIES and MSG_TERMINATED
// advisories of topics and queues into DLQ entries. MAX_DELIVERIES means
// the broker stopped delivering an event whose last attempt never
// reported (its consumer died during it): the router copies the event by
// sequence into the DLQ with class max_deliveries and, for a queue,
// deletes it from the work-queue stream. MSG_TERMINATED for an event that
// has no DLQ entry yet (a client terminated it without copying it) gets an
// entry with class terminated (with an empty payload if a work queue
// already deleted it). Entries already written (by the runtime before it
// terminated, or by another router) are left alone: one entry per event
// and consumer.
//
// consumer.Member and consumer.Workers run a router for their own object
// unless told not to; platformd runs one for every object (Routers).
type Router struct {
	js      jetstream.JetStream
	objects []string
	log     *slog.Logger

	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
}

// NewRouter returns a router for the named topics and queues.
func NewRouter(js jetstream.JetStream, objects []string, log *slog.Logger) *Router {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Router{js: js, objects: objects, log: log}
}

// Start binds to every object's events stream (it must exist: apply the
// topic or queue first) and starts routing.
func (r *Router) Start(ctx context.Context) error {
	var cons []jetstream.Consumer
	for _, obj := range r.objects {
		c, err := r.js.CreateOrUpdateConsumer(ctx, platform.DLQEventsStream(obj), jetstream.ConsumerConfig{
			Durable: RouterConsumer, Description: "platform DLQ router of " + obj,
			AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, DeliverPolicy: jetstream.DeliverAllPolicy,
		})
		if err != nil {
			return fmt.Errorf("platform: DLQ router of %s: %w", obj, err)
		}
		cons = append(cons, c)
	}
	rctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	for i, c := range cons {
		r.wg.Add(1)
		go r.run(rctx, r.objects[i], c)
	}
	return nil
}

// Close stops routing. Idempotent.
func (r *Router) Close(ctx context.Context) error {
	r.once.Do(func() {
		if r.cancel != nil {
			r.cancel()
		}
	})
	return parallel.Wait(ctx, &r.wg)
}

// routerPullExpiry is how long each of a router's pull requests waits;
// one that goes silent for two heartbeats (half of it each) is replaced.
const routerPullExpiry = 10 * time.Second

// run routes the object's advisories through one pull subscription
// (nats.go Consume) for the router's life: an advisory served to a
// request late still reaches it (a fetch per batch gave up on its inbox
// a second after the request's expiry, and such an advisory waited out
// the consumer's AckWait), and an idle router sends a request every
// routerPullExpiry instead of every fetchWait. The subscription is
// started again if it ends by itself.
func (r *Router) run(ctx context.Context, object string, c jetstream.Consumer) {
	defer r.wg.Done()
	var busy sync.Mutex // held while an advisory is routed
	stopped := false    // under busy
	handle := func(msg jetstream.Msg) {
		busy.Lock()
		defer busy.Unlock()
		if stopped || ctx.Err() != nil {
			return // comes again to the next router
		}
		if err := r.route(ctx, object, msg.Data()); err != nil {
			r.log.Warn("platform: DLQ router", "object", object, "err", err)
			_ = msg.NakWithDelay(time.Second)
			return
		}
		_ = msg.Ack()
	}
	for ctx.Err() == nil {
		cc, err := c.Consume(handle, jetstream.PullMaxMessages(50), jetstream.PullExpiry(routerPullExpiry))
		if err == nil {
			select {
			case <-ctx.Done():
				cc.Stop()
				busy.Lock() // Close returns once no advisory is being routed
				stopped = true
				busy.Unlock()
				return
			case <-cc.Closed():
			}
		}
		retry.Sleep(ctx, time.Second)
	}
}

// deliveryAdvisory is the part of the MAX_DELIVERIES and MSG_TERMINATED
// advisories the router uses.
type deliveryAdvisory struct {
	Type       string    `json:"type"`
	Time       time.Time `json:"timestamp"`
	Stream     string    `json:"stream"`
	Consumer   string    `json:"consumer"`
	StreamSeq  uint64    `json:"stream_seq"`
	Deliveries uint64    `json:"deliveries"`
	Reason     string    `json:"reason"`
}

const (
	advisoryMaxDeliver = "io.nats.jetstream.advisory.v1.max_deliver"
	advisoryTerminated = "io.nats.jetstream.advisory.v1.terminated"
)

func (r *Router) route(ctx context.Context, object string, data []byte) error {
	var a deliveryAdvisory
	if err := json.Unmarshal(data, &a); err != nil || a.StreamSeq == 0 {
		return nil // not an advisory the router understands: skip it
	}
	if a.Type != advisoryMaxDeliver && a.Type != advisoryTerminated {
		return nil
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	subj := platform.DLQSubject(a.Stream, a.Consumer, a.StreamSeq)
	if ok, err := entryExists(actx, r.js, object, subj); err != nil {
		return err
	} else if ok {
		return nil
	}
	s, err := r.js.Stream(actx, a.Stream)
	if err != nil {
		return err
	}
	d := Failure{
		Object: object, Stream: a.Stream, Seq: a.StreamSeq, Consumer: a.Consumer, Group: a.Consumer,
		Attempts: a.Deliveries, Last: a.Time,
	}
	if c, err := r.js.Consumer(actx, a.Stream, a.Consumer); err == nil {
		md := c.CachedInfo().Config.Metadata
		if g := md[platform.MetaGroup]; g != "" {
			d.Group = g
		} else if q := md[platform.MetaQueue]; q != "" {
			d.Group = q
		}
	}
	if a.Type == advisoryMaxDeliver {
		d.Class = ClassMaxDeliveries
		d.Reason = "no outcome after " + strconv.FormatUint(a.Deliveries, 10) + " deliveries: the consumer stopped or crashed during its last attempt"
	} else {
		d.Class = ClassTerminated
		d.Reason = "terminated without a DLQ copy: " + a.Reason
	}
	orig, err := s.GetMsg(actx, a.StreamSeq)
	switch {
	case err == nil:
		d.Subject, d.Payload, d.Headers, d.Published = orig.Subject, orig.Data, orig.Header, orig.Time
	case errors.Is(err, jetstream.ErrMsgNotFound):
		d.Reason += " (the event is no longer in the stream; payload lost)"
	default:
		return err
	}
	// The first failure, if the runtime recorded one before retrying.
	failures := NewFirstFailures(r.js, 1)
	if t, ok := failures.Recorded(actx, a.Stream, a.Consumer, a.StreamSeq); ok {
		d.First = t
	}
	if err := Write(actx, r.js, d); err != nil {
		return err
	}
	failures.Forget(actx, a.Stream, a.Consumer, a.StreamSeq)
	// A work queue keeps an event its consumer gave up on: remove it now
	// that it is in the DLQ.
	if platform.StreamKind(&s.CachedInfo().Config) == platform.StreamKindQueue && err == nil && orig != nil {
		if derr := s.DeleteMsg(actx, a.StreamSeq); derr != nil && !errors.Is(derr, jetstream.ErrMsgNotFound) {
			r.log.Warn("platform: DLQ router: delete dead-lettered job", "stream", a.Stream, "seq", a.StreamSeq, "err", derr)
		}
	}
	return nil
}

// Objects returns the topics and queues of the account that have a
// DLQ events stream (every object the Reconciler applied), by name.
func Objects(ctx context.Context, js jetstream.JetStream) ([]string, error) {
	var out []string
	it := js.ListStreams(ctx)
	for info := range it.Info() {
		if md := info.Config.Metadata; platform.StreamKind(&info.Config) == platform.StreamKindDLQEvents && md[platform.MetaDLQOf] != "" {
			out = append(out, md[platform.MetaDLQOf])
		}
	}
	if err := it.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return nil, fmt.Errorf("platform: list DLQ events streams: %w", err)
	}
	slices.Sort(out)
	return out, nil
}

// Routers runs one Router for every topic and queue of an account,
// as platformd does: at Start for every object applied so far, then every
// Refresh for objects applied later (through the control API or another
// daemon). Routers of one object compete on its durable consumer, so
// running them next to the routers of Members and Workers is safe: each
// advisory is handled once, and an entry already written is left alone.
type Routers struct {
	js      jetstream.JetStream
	log     *slog.Logger
	refresh time.Duration

	mu      sync.Mutex
	routers map[string]*Router
	cancel  context.CancelFunc
	done    chan struct{}
	once    sync.Once
}

// NewRouters returns routers for every object of js's account,
// looking for new objects every refresh (default 10 s).
func NewRouters(js jetstream.JetStream, refresh time.Duration, log *slog.Logger) *Routers {
	if refresh <= 0 {
		refresh = 10 * time.Second
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Routers{js: js, log: log, refresh: refresh, routers: map[string]*Router{}}
}

// Start routes for every object applied so far; it returns the first
// failure to bind (the objects bound so far keep routing until Close).
func (s *Routers) Start(ctx context.Context) error {
	err := s.sync(ctx)
	rctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.done = cancel, make(chan struct{})
	go s.loop(rctx)
	return err
}

// Objects returns the objects routed now, by name.
func (s *Routers) Objects() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.routers))
}

func (s *Routers) loop(ctx context.Context) {
	defer close(s.done)
	tick.Repeat(ctx, s.refresh, nil, func(bool) bool {
		sctx, cancel := context.WithTimeout(ctx, s.refresh)
		defer cancel()
		if err := s.sync(sctx); err != nil && ctx.Err() == nil {
			s.log.Warn("platform: DLQ routers: refresh", "err", err)
		}
		return true
	})
}

// sync starts a router for every object that has none yet.
func (s *Routers) sync(ctx context.Context) error {
	objects, err := Objects(ctx, s.js)
	if err != nil {
		return err
	}
	var errs []error
	for _, obj := range objects {
		s.mu.Lock()
		_, running := s.routers[obj]
		s.mu.Unlock()
		if running {
			continue
		}
		r := NewRouter(s.js, []string{obj}, s.log)
		if err := r.Start(ctx); err != nil {
			errs = append(errs, err)
			continue
		}
		s.mu.Lock()
		s.routers[obj] = r
		s.mu.Unlock()
		s.log.Info("platform: DLQ router started", "object", obj)
	}
	return errors.Join(errs...)
}

// Close stops every router within ctx. Idempotent.
func (s *Routers) Close(ctx context.Context) error {
	var errs []error
	s.once.Do(func() {
		if s.cancel != nil {
			s.cancel()
			<-s.done
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, r := range s.routers {
			errs = append(errs, r.Close(ctx))
		}
	})
	return errors.Join(errs...)
}
