package tenancy

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/time/rate"
)

// HeaderTenant is the header the ingest stamps on every stored event: the
// name of the tenant whose account the publisher authenticated to. A
// value supplied by the client is removed first.
const HeaderTenant = "Platform-Tenant"

// ErrCodeRateLimited is the err_code of the JetStream-shaped error a
// publish over the rate quota receives (its code is 429).
const ErrCodeRateLimited = 10429

// ingestQueue is the subscription's queue group: with several daemons,
// each event is taken by one of them.
const ingestQueue = "platform-ingest"

// Stats are a tenant's publish counters (since this daemon started).
type Stats struct {
	Accepted, AcceptedBytes atomic.Uint64
	Throttled, Rejected     atomic.Uint64
	Denied                  atomic.Uint64
}

// ingest is the only path from a tenant's publishers to its stored
// subjects. It subscribes, in the tenant's account, to the subjects
// publishers use; applies the publish-rate quota; removes any client
// Platform-Tenant header and stamps the real one; and republishes to the
// stored subject with the original reply subject, so the stream's ack
// (or error) goes straight back to the publisher.
type ingest struct {
	tenant string
	nc     *nats.Conn
	stats  *Stats
	onHit  func(detail string)

	mu        sync.Mutex
	subjects  map[string]bool // taken when active
	active    bool            // this manager holds the tenant's lease
	subs      map[string]*nats.Subscription
	quota     Quota
	unlimited atomic.Bool // no rate quota: forward in the callback
	policy    Policy
	msgs      *rate.Limiter
	bytes     *rate.Limiter
	maxQueue  atomic.Int64
	desc      string
	refusals  map[string][]byte // why -> encoded 429 error

	queue   chan *nats.Msg
	done    chan struct{}
	wg      sync.WaitGroup
	lastHit atomic.Int64
	stamp   []string // the Platform-Tenant header value, shared
}

const queueCap = 1 << 14

func newIngest(tenant string, nc *nats.Conn, q Quota, stats *Stats, onHit func(string)) *ingest {
	in := &ingest{
		tenant: tenant, nc: nc, stats: stats, onHit: onHit,
		subs: map[string]*nats.Subscription{}, subjects: map[string]bool{},
		stamp: []string{tenant},
		msgs:  rate.NewLimiter(rate.Inf, 0),
		bytes: rate.NewLimiter(rate.Inf, 0),
		queue: make(chan *nats.Msg, queueCap),
		done:  make(chan struct{}),
	}
	in.setQuota(q)
	in.wg.Add(1)
	go in.worker()
	return in
}

// setQuota changes the limits in place: it takes effect on the next event.
func (in *ingest) setQuota(q Quota) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.quota == q && in.desc != "" {
		return
	}
	in.quota = q
	in.policy = q.Policy
	in.unlimited.Store(q.PublishRate <= 0 && q.PublishBytesRate <= 0)
	now := time.Now()
	if q.PublishRate > 0 {
		in.msgs.SetLimitAt(now, rate.Limit(q.PublishRate))
		in.msgs.SetBurstAt(now, max(1, q.PublishRate/20))
	} else {
		in.msgs.SetLimitAt(now, rate.Inf)
	}
	if q.PublishBytesRate > 0 {
		in.bytes.SetLimitAt(now, rate.Limit(q.PublishBytesRate))
		in.bytes.SetBurstAt(now, int(max(q.PublishBytesRate/20, q.MaxPayload, 1)))
	} else {
		in.bytes.SetLimitAt(now, rate.Inf)
	}
	// At most half a second of quota waits for the throttle.
	in.maxQueue.Store(int64(min(queueCap, max(64, q.PublishRate/2))))
	in.refusals = map[string][]byte{}
	in.desc = fmt.Sprintf("%d events/s, %d bytes/s (0: unlimited), policy %s", q.PublishRate, q.PublishBytesRate, q.Policy)
}

// subscribe adds subject (e.g. "orders.*") to what the ingest takes; it
// subscribes at once if the ingest is active.
func (in *ingest) subscribe(subject string) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.subjects[subject] = true
	if !in.active {
		return nil
	}
	return in.subscribeLocked(subject)
}

func (in *ingest) subscribeLocked(subject string) error {
	if _, ok := in.subs[subject]; ok {
		return nil
	}
	sub, err := in.nc.QueueSubscribe(subject, ingestQueue, in.handle)
	if err != nil {
		return fmt.Errorf("tenancy: ingest %s %s: %w", in.tenant, subject, err)
	}
	_ = sub.SetPendingLimits(1<<16, 256<<20)
	in.subs[subject] = sub
	return in.nc.Flush()
}

// setActive subscribes to every subject (the manager holds the tenant's
// lease) or unsubscribes from all (a standby, or a lost lease). Events
// already in the throttle queue are still forwarded.
func (in *ingest) setActive(on bool) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if !on && !in.active {
		return nil
	}
	in.active = on
	if !on {
		for subj, s := range in.subs {
			_ = s.Unsubscribe()
			delete(in.subs, subj)
		}
		return nil
	}
	var errs []error
	for subj := range in.subjects {
		if err := in.subscribeLocked(subj); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// isActive reports whether the ingest takes publishes.
func (in *ingest) isActive() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.active
}

func (in *ingest) handle(m *nats.Msg) {
	if in.unlimited.Load() {
		in.forward(m)
		return
	}
	in.mu.Lock()
	policy := in.policy
	in.mu.Unlock()
	if policy == PolicyReject {
		now := time.Now()
		if !in.msgs.AllowN(now, 1) || !in.bytes.AllowN(now, len(m.Data)) {
			in.refuse(m, "publish rate quota exceeded")
			return
		}
		in.forward(m)
		return
	}
	if int64(len(in.queue)) >= in.maxQueue.Load() {
		in.refuse(m, "publish rate quota exceeded and the throttle queue is full")
		return
	}
	select {
	case in.queue <- m:
	default:
		in.refuse(m, "publish rate quota exceeded and the throttle queue is full")
	}
}

// worker forwards queued events as fast as the quota allows.
func (in *ingest) worker() {
	defer in.wg.Done()
	for {
		select {
		case <-in.done:
			return
		case m := <-in.queue:
			now := time.Now()
			r1 := in.msgs.ReserveN(now, 1)
			r2 := in.bytes.ReserveN(now, len(m.Data))
			if !r1.OK() || !r2.OK() {
				in.refuse(m, "event larger than the byte-rate burst")
				continue
			}
			if d := max(r1.DelayFrom(now), r2.DelayFrom(now)); d > 0 {
				in.stats.Throttled.Add(1)
				select {
				case <-time.After(d):
				case <-in.done:
					return
				}
			}
			in.forward(m)
		}
	}
}

// forward rewrites m in place (it is not used after) and republishes it:
// no copy of the payload or the headers per event.
func (in *ingest) forward(m *nats.Msg) {
	subject, n := m.Subject, len(m.Data)
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	for k := range m.Header {
		if strings.EqualFold(k, HeaderTenant) {
			delete(m.Header, k) // a client cannot choose its tenant
		}
	}
	m.Header[HeaderTenant] = in.stamp
	m.Subject = storedPrefix + "." + subject
	if err := in.nc.PublishMsg(m); err != nil {
		m.Subject = subject
		in.refuse(m, "platform ingest could not forward: "+err.Error())
		return
	}
	in.stats.Accepted.Add(1)
	in.stats.AcceptedBytes.Add(uint64(n))
}

// apiError is the shape of a JetStream API error, so jetstream.Publish
// returns a *jetstream.APIError with Code 429.
type apiError struct {
	Error struct {
		Code        int    `json:"code"`
		ErrCode     int    `json:"err_code"`
		Description string `json:"description"`
	} `json:"error"`
}

// refuse answers m with the 429 error. The error bodies are encoded once
// per quota change, so refusing a flood costs one publish per event.
func (in *ingest) refuse(m *nats.Msg, why string) {
	in.stats.Rejected.Add(1)
	in.mu.Lock()
	body, ok := in.refusals[why]
	if !ok {
		var e apiError
		e.Error.Code, e.Error.ErrCode = 429, ErrCodeRateLimited
		e.Error.Description = fmt.Sprintf("tenant %s: %s (quota %s)", in.tenant, why, in.desc)
		body, _ = json.Marshal(e)
		if len(in.refusals) < 8 {
			in.refusals[why] = body
		}
	}
	in.mu.Unlock()
	if m.Reply != "" {
		_ = in.nc.Publish(m.Reply, body)
	}
	// One audit record per tenant per 10 s at most.
	now := time.Now().UnixNano()
	last := in.lastHit.Load()
	if now-last > int64(10*time.Second) && in.lastHit.CompareAndSwap(last, now) && in.onHit != nil {
		var e apiError
		_ = json.Unmarshal(body, &e)
		in.onHit(e.Error.Description)
	}
}

func (in *ingest) close() {
	in.mu.Lock()
	for _, s := range in.subs {
		_ = s.Unsubscribe()
	}
	in.subs = map[string]*nats.Subscription{}
	in.mu.Unlock()
	select {
	case <-in.done:
	default:
		close(in.done)
	}
	in.wg.Wait()
}
