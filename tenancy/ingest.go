package tenancy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/time/rate"

	"github.com/msgplatform/platform/internal/wire"
	"github.com/msgplatform/platform/platform"
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

// probeSubject, in a tenant's account, is answered by the tenant's
// active ingest (and subscribed after its publish subjects, on the same
// connection, so the servers learn of it after them): a reply to a probe
// sent through a node means that node routes the tenant's publishes to
// the ingest. Tenant users cannot publish to it (allow lists only).
const probeSubject = "_PLATFORM.ingest.probe"

// Stats are a tenant's publish counters (since this daemon started).
// Rejected counts events refused with the 429 error on their reply
// subject (the publisher sees it); Dropped counts refused events that had
// no reply subject (core NATS fire-and-forget publishes, e.g. `nats pub`:
// nobody can be told, so the loss is counted here, in the metric
// platform_tenant_publish_dropped_total and in a quota.hit audit record).
type Stats struct {
	Accepted, AcceptedBytes atomic.Uint64
	Throttled, Rejected     atomic.Uint64
	Dropped                 atomic.Uint64
	// Refused counts events the store would refuse (see checkSize),
	// answered with JetStream's own error.
	Refused atomic.Uint64
	Denied  atomic.Uint64
	// Out and OutBytes are what the servers delivered to the tenant's
	// own connections that have closed (see watchDisconnects).
	Out, OutBytes atomic.Uint64
	// Service is how many platform service connections (ConnectTenant)
	// this manager holds open in the tenant's account.
	Service atomic.Int64
}

// ingest is the only path from a tenant's publishers to its stored
// subjects. It subscribes, in the tenant's account, to the subjects
// publishers use; applies the publish-rate quota; removes any client
// Platform-Tenant header and stamps the real one; and republishes to the
// stored subject with the original reply subject, so the stream's ack
// (or error) goes straight back to the publisher.
//
// Events travel on fwd, a wire connection (internal/wire): its read loop
// runs handle on each event as a slice of its read buffer, and the
// republishes of one read leave in one write. nc (nats.go, the same
// account) serves the JetStream requests (placeLeader).
type ingest struct {
	tenant string
	nc     *nats.Conn
	fwd    *wire.Conn
	stats  *Stats
	onHit  func(detail string)

	mu        sync.Mutex
	subjects  map[string]bool // taken when active
	active    bool            // this manager holds the tenant's lease
	subs      map[string]uint64
	quota     Quota
	unlimited atomic.Bool // no rate quota: forward in the callback
	reject    atomic.Bool // policy reject (else throttle)
	msgs      *rate.Limiter
	bytes     *rate.Limiter
	maxQueue  atomic.Int64
	// maxPayload is the tenant's max_payload quota (0: the server's):
	// header and payload of a stored event stay within it.
	maxPayload atomic.Int64
	queued     atomic.Int64 // header and payload bytes waiting in the throttle queue
	desc       string
	refusals   atomic.Pointer[refusals] // replaced by setQuota; read without a lock

	queue   chan *event
	done    chan struct{}
	wg      sync.WaitGroup
	lastHit atomic.Int64
	stamp   []byte // "Platform-Tenant: <tenant>\r\n"
	only    []byte // the header block of an event that had none: the stamp alone (read only)
	hdrBuf  []byte // the read loop's scratch for a rewritten header block
}

// event is a throttled event, copied out of the read buffer: subject,
// reply, header block and payload in one allocation.
type event struct {
	subject, reply, header, data []byte
}

func newEvent(m *wire.Msg) *event {
	b := make([]byte, 0, len(m.Subject)+len(m.Reply)+len(m.Header)+len(m.Data))
	b = append(append(append(append(b, m.Subject...), m.Reply...), m.Header...), m.Data...)
	a, r, h := len(m.Subject), len(m.Subject)+len(m.Reply), len(m.Subject)+len(m.Reply)+len(m.Header)
	e := &event{subject: b[:a:a], reply: b[a:r:r], data: b[h:]}
	if m.Header != nil {
		e.header = b[r:h:h]
	}
	return e
}

// refusals are the encoded 429 errors of one quota, by reason: built
// once per quota and reason, so refusing a flood costs one publish per
// event and no lock.
type refusals struct {
	desc   string
	bodies map[string][]byte // why -> encoded error
}

// placeWait bounds placeLeader.
const placeWait = time.Second

// queueCap bounds the throttle queue in events, maxQueuedBytes in
// header and payload bytes: whatever the quota, a flood cannot make the ingest
// buffer without bound.
const (
	queueCap       = 1 << 14
	maxQueuedBytes = 64 << 20
)

func newIngest(tenant string, nc *nats.Conn, fwd *wire.Conn, q Quota, stats *Stats, onHit func(string)) *ingest {
	in := &ingest{
		tenant: tenant, nc: nc, fwd: fwd, stats: stats, onHit: onHit,
		subs: map[string]uint64{}, subjects: map[string]bool{},
		stamp: []byte(HeaderTenant + ": " + tenant + "\r\n"),
		msgs:  rate.NewLimiter(rate.Inf, 0),
		bytes: rate.NewLimiter(rate.Inf, 0),
		queue: make(chan *event, queueCap),
		done:  make(chan struct{}),
	}
	in.only = append(append([]byte("NATS/1.0\r\n"), in.stamp...), "\r\n"...)
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
	in.reject.Store(q.Policy == PolicyReject)
	in.maxPayload.Store(q.MaxPayload)
	in.unlimited.Store(q.PublishRate <= 0 && q.PublishBytesRate <= 0)
	now := time.Now()
	if q.PublishRate > 0 {
		in.msgs.SetLimitAt(now, rate.Limit(q.PublishRate))
		// A burst of a tenth of a second: an ingest delayed by a GC pause
		// or a busy CPU keeps the tokens that accrued meanwhile (with
		// 1/20 s, reject admitted half the quota on a loaded machine), and
		// no window of a second admits more than 1.1x the quota.
		in.msgs.SetBurstAt(now, max(1, q.PublishRate/10))
	} else {
		in.msgs.SetLimitAt(now, rate.Inf)
	}
	if q.PublishBytesRate > 0 {
		in.bytes.SetLimitAt(now, rate.Limit(q.PublishBytesRate))
		in.bytes.SetBurstAt(now, int(max(q.PublishBytesRate/10, q.MaxPayload, 1)))
	} else {
		in.bytes.SetLimitAt(now, rate.Inf)
	}
	// Up to two seconds of quota (at least 256 events) wait for the
	// throttle: enough for the in-flight windows of several publishers,
	// so a flooding tenant is slowed by delayed acks (its publishers stop
	// at their window and send no more) instead of being refused and
	// immediately sending again, which would cost every tenant CPU.
	in.maxQueue.Store(int64(min(queueCap, max(256, 2*q.PublishRate))))
	in.desc = fmt.Sprintf("%d events/s, %d bytes/s (0: unlimited), policy %s", q.PublishRate, q.PublishBytesRate, q.Policy)
	in.refusals.Store(&refusals{desc: in.desc, bodies: map[string][]byte{}})
}

// subscribe adds subject (e.g. "orders.*") to what the ingest takes; it
// subscribes at once if the ingest is active. A subject new to an active
// ingest whose stream holds nothing yet (a topic or queue just created)
// first has its stream leader placed on the ingest's server (see
// placeLeader).
func (in *ingest) subscribe(subject string) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	isNew := !in.subjects[subject]
	in.subjects[subject] = true
	if !in.active {
		return nil
	}
	_, had := in.subs[subject]
	if !had && isNew {
		in.placeLeader(subject)
	}
	if err := in.subscribeLocked(subject); err != nil || had {
		return err
	}
	// The probe's subscription stays the last one made, so that after a
	// reconnect (wire subscribes again in the order they were made) a
	// probe answered means every subject is subscribed again too.
	if sid, ok := in.subs[probeSubject]; ok {
		_ = in.fwd.Unsubscribe(sid)
		delete(in.subs, probeSubject)
		return in.subscribeLocked(probeSubject)
	}
	return nil
}

// placeLeader asks JetStream to move the leader of the (empty) stream
// behind subject to the server the ingest is connected to, and waits
// (placeWait at most: the heartbeat may be the caller, and must renew the
// lease in time) until it has moved. Every event passes the ingest and is then
// published to that leader: on the same server the republish crosses no
// route, so the ingest costs one local client hop over a raw publish
// instead of up to two extra route hops. Best effort: a stream that
// already holds events, an R1 stream on another server or a failed
// request is left where it is. Callers hold in.mu.
func (in *ingest) placeLeader(subject string) {
	obj, ok := strings.CutSuffix(subject, ".*")
	if !ok {
		if obj, ok = strings.CutSuffix(subject, ".>"); !ok {
			return
		}
	}
	server := in.fwd.ServerName() // where the forwarded events enter
	if server == "" {
		return
	}
	js, err := jetstream.NewWithAPIPrefix(in.nc, APIPrefix)
	if err != nil {
		return
	}
	stream := StreamName(obj)
	leader := func(ctx context.Context) (*jetstream.StreamInfo, bool) {
		s, err := js.Stream(ctx, stream)
		if err != nil {
			return nil, false
		}
		info := s.CachedInfo()
		return info, info.Cluster != nil && info.Cluster.Leader != ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), placeWait)
	defer cancel()
	info, ok := leader(ctx)
	if !ok || info.State.Msgs > 0 || info.Cluster.Leader == server {
		return
	}
	peer := false
	for _, r := range info.Cluster.Replicas {
		peer = peer || r.Name == server
	}
	if !peer {
		return
	}
	body, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": server}})
	resp, err := in.nc.RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, body)
	if err != nil {
		return
	}
	var r struct {
		Error *struct{} `json:"error"`
	}
	if json.Unmarshal(resp.Data, &r) != nil || r.Error != nil {
		return
	}
	for ctx.Err() == nil {
		if info, ok := leader(ctx); ok && info.Cluster.Leader == server {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (in *ingest) subscribeLocked(subject string) error {
	if _, ok := in.subs[subject]; ok {
		return nil
	}
	handler := in.handle
	if subject == probeSubject {
		handler = func(m *wire.Msg) {
			if len(m.Reply) > 0 {
				_ = in.fwd.Publish("", m.Reply, nil, nil, []byte("ok"))
			}
		}
	}
	// The read loop never blocks in handle (it forwards, queues or
	// refuses at once), so events wait in the server's buffer for this
	// connection only while the ingest is starved of CPU.
	sid, err := in.fwd.Subscribe(subject, ingestQueue, handler)
	if err != nil {
		return fmt.Errorf("tenancy: ingest %s %s: %w", in.tenant, subject, err)
	}
	in.subs[subject] = sid
	// In place on the server before this returns, as callers expect
	// (e.g. resume, then the probe).
	return in.fwd.Sync(2 * time.Second)
}

// setActive subscribes to every subject (the manager holds the tenant's
// lease) or unsubscribes from all (a standby, or a lost lease). Events
// already in the throttle queue are still forwarded, and so are those the
// server had sent before it took the unsubscribe (wire hands them to
// the handler still): their publishers, having sent before the lease
// moved, would otherwise wait for an ack until they time out.
func (in *ingest) setActive(on bool) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if !on && !in.active {
		return nil
	}
	in.active = on
	if !on {
		for subj, sid := range in.subs {
			_ = in.fwd.Unsubscribe(sid)
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
	if err := in.subscribeLocked(probeSubject); err != nil { // last
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// isActive reports whether the ingest takes publishes.
func (in *ingest) isActive() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.active
}

// handle is the subscription callback, on the wire read loop: per
// event, two atomic loads on the unlimited path, no lock, no clock and
// no allocation.
//
// Order: the read loop delivers in the order the server sent (a
// publisher's events on a subject come in its order), and each event is
// forwarded here or queued for the single worker, so they are published
// in that order. Events still queued when the quota is lifted go first:
// new ones queue behind them until the queue is empty.
func (in *ingest) handle(m *wire.Msg) {
	// The stream's ack, and any refusal, go only to an inbox (gate.go):
	// a reply elsewhere is dropped, the event kept.
	if len(m.Reply) > 0 && !inboxReply(m.Reply) {
		m.Reply = nil
	}
	unlimited := in.unlimited.Load()
	if unlimited && len(in.queue) == 0 {
		in.forward(m.Subject, m.Reply, m.Header, m.Data, &in.hdrBuf)
		return
	}
	if in.reject.Load() && !unlimited {
		now := time.Now()
		if !in.msgs.AllowN(now, 1) || !in.bytes.AllowN(now, len(m.Header)+len(m.Data)) {
			in.refuse(m.Reply, "publish rate quota exceeded")
			return
		}
		in.forward(m.Subject, m.Reply, m.Header, m.Data, &in.hdrBuf)
		return
	}
	n := int64(len(m.Header) + len(m.Data))
	if !unlimited && (int64(len(in.queue)) >= in.maxQueue.Load() || in.queued.Load()+n > maxQueuedBytes) {
		in.refuse(m.Reply, "publish rate quota exceeded and the throttle queue is full")
		return
	}
	in.queued.Add(n)
	select {
	case in.queue <- newEvent(m):
	default:
		in.queued.Add(-n)
		in.refuse(m.Reply, "publish rate quota exceeded and the throttle queue is full")
	}
}

// batchWait is the shortest wait of the throttle worker. A tenant held
// at its quota (its publishers' windows full, events waiting) would
// otherwise be forwarded one event every 1/quota seconds: a timer
// wakeup, a socket write, a server read and a raft proposal per event,
// paid on the servers every tenant shares. Waiting at least batchWait
// lets the tokens of several events accrue; they are then forwarded
// back to back and travel together (one write, one proposal batch). The
// bucket still decides how many pass, so the quota holds (a batch is at
// most batchWait of quota, far below the bucket's burst). A shorter wait
// costs the servers more per event; a longer one sends longer bursts that
// delay other tenants' events.
const batchWait = 5 * time.Millisecond

// reconnectWait is how long the throttle worker waits for the
// forwarding connection to come back before it refuses a queued event.
const reconnectWait = 5 * time.Second

// worker forwards queued events as fast as the quota allows, in batches
// (see batchWait); one timer, reset per wait, so waiting allocates
// nothing.
func (in *ingest) worker() {
	defer in.wg.Done()
	wait := time.NewTimer(time.Hour)
	wait.Stop()
	behind := 0 // events that were queued while the worker waited: throttled too
	var hdrBuf []byte
	for {
		select {
		case <-in.done:
			return
		case e := <-in.queue:
			n := len(e.header) + len(e.data)
			in.queued.Add(-int64(n))
			now := time.Now()
			r1 := in.msgs.ReserveN(now, 1)
			r2 := in.bytes.ReserveN(now, n)
			if !r1.OK() || !r2.OK() {
				in.refuse(e.reply, "event larger than the byte-rate burst")
				continue
			}
			d := max(r1.DelayFrom(now), r2.DelayFrom(now))
			if d <= 0 && behind > 0 {
				behind--
				in.stats.Throttled.Add(1)
			}
			if d > 0 {
				in.stats.Throttled.Add(1)
				_ = in.fwd.Flush() // what was forwarded leaves before the wait
				wait.Reset(max(d, batchWait))
				select {
				case <-wait.C:
				case <-in.done:
					wait.Stop()
					return
				}
				behind = len(in.queue)
			}
			// A queued event outlives a reconnect of the forwarding
			// connection (nats.go buffered publishes meanwhile): wait
			// for it, a bounded time, before it is refused.
			for wait := time.Duration(0); !in.fwd.Connected() && wait < reconnectWait; wait += 10 * time.Millisecond {
				select {
				case <-in.done:
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
			in.forward(e.subject, e.reply, e.header, e.data, &hdrBuf)
			if len(in.queue) == 0 {
				_ = in.fwd.Flush()
			}
		}
	}
}

// forward republishes an event to its stored subject with the stamped
// header block (see stampHeader; scratch is the caller's buffer for it).
// An event the store would refuse for its size is answered here with
// JetStream's own error and counted as refused, never as accepted.
func (in *ingest) forward(subject, reply, hdr, data []byte, scratch *[]byte) {
	h := in.stampHeader(hdr, scratch)
	if body := in.checkSize(len(h), len(data)); body != nil {
		in.stats.Refused.Add(1)
		if len(reply) > 0 {
			_ = in.fwd.Publish("", reply, nil, nil, body)
		}
		return
	}
	if err := in.fwd.Publish(storedPrefix+".", subject, reply, h, data); err != nil {
		in.refuse(reply, "platform ingest could not forward: "+err.Error())
		return
	}
	in.stats.Accepted.Add(1)
	in.stats.AcceptedBytes.Add(uint64(len(h) + len(data)))
}

// maxHeader is the largest header block JetStream stores.
const maxHeader = math.MaxUint16

// The encoded errors JetStream answers an oversized event with (codes
// and descriptions as nats-server 2.15 has them), so a publisher sees the
// same refusal whether the ingest or the stream refuses.
var (
	errHeaderTooBig = []byte(`{"error":{"code":400,"err_code":10097,"description":"header size exceeds maximum allowed of 64k"}}`)
	errMsgTooBig    = []byte(`{"error":{"code":400,"err_code":10054,"description":"message size exceeds maximum allowed"}}`)
)

// checkSize returns the error the store would answer an event of a
// stored header of hdr bytes and data bytes with (nil: it fits): a header
// over 64 KiB, or header and payload over the tenant's max_payload (the
// account's limit, which the ingest's own connection is held to).
func (in *ingest) checkSize(hdr, data int) []byte {
	if hdr > maxHeader {
		return errHeaderTooBig
	}
	if lim := in.maxPayload.Load(); lim > 0 && int64(hdr+data) > lim {
		return errMsgTooBig
	}
	return nil
}

var (
	crlf           = []byte("\r\n")
	platformPrefix = []byte(platform.HeaderPrefix)
)

// isPlatformKey reports whether a header line's key (leading spaces
// allowed) is in the platform's namespace, in any case: the byte form of
// platform.IsPlatformHeader, on the read buffer.
func isPlatformKey(k []byte) bool {
	k = bytes.TrimLeft(k, " \t")
	return len(k) >= len(platformPrefix) && bytes.EqualFold(k[:len(platformPrefix)], platformPrefix)
}

// stampHeader is the header block an event is stored with: the shared
// stamp alone for an event without headers (the common case: nothing is
// copied), else the event's header lines without any header of the
// platform's namespace (platform.HeaderPrefix, whatever the case of the
// key: a client can neither choose its tenant nor pass for a canary, a
// redriven copy or a dead letter) and the stamp, built in *scratch. The first line is always "NATS/1.0" (a
// status a client put there is not kept).
func (in *ingest) stampHeader(hdr []byte, scratch *[]byte) []byte {
	if len(hdr) == 0 {
		return in.only
	}
	b := append((*scratch)[:0], "NATS/1.0\r\n"...)
	rest := hdr
	if i := bytes.Index(rest, crlf); i >= 0 {
		rest = rest[i+2:]
	} else {
		rest = nil
	}
	for len(rest) > 0 {
		i := bytes.Index(rest, crlf)
		if i < 0 {
			i = len(rest)
		}
		line := rest[:i]
		rest = rest[min(len(rest), i+2):]
		if len(line) == 0 {
			break // the blank line that ends the block
		}
		if k := bytes.IndexByte(line, ':'); k < 0 || isPlatformKey(line[:k]) {
			continue // malformed (no key), or the platform's
		}
		b = append(append(b, line...), crlf...)
	}
	b = append(append(b, in.stamp...), crlf...)
	*scratch = b
	return b
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
func (in *ingest) refuse(reply []byte, why string) {
	if len(reply) == 0 {
		in.stats.Dropped.Add(1) // fire-and-forget: nobody to tell
	} else {
		in.stats.Rejected.Add(1)
	}
	rs := in.refusals.Load()
	body, ok := rs.bodies[why]
	if !ok {
		var e apiError
		e.Error.Code, e.Error.ErrCode = 429, ErrCodeRateLimited
		e.Error.Description = fmt.Sprintf("tenant %s: %s (quota %s)", in.tenant, why, rs.desc)
		body, _ = json.Marshal(e)
		if len(rs.bodies) < 8 { // copy on write; a lost race only encodes again
			next := &refusals{desc: rs.desc, bodies: make(map[string][]byte, len(rs.bodies)+1)}
			for k, v := range rs.bodies {
				next.bodies[k] = v
			}
			next.bodies[why] = body
			in.refusals.CompareAndSwap(rs, next)
		}
	}
	if len(reply) > 0 {
		_ = in.fwd.Publish("", reply, nil, nil, body)
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

// counts are the events the forwarding connection received and sent.
func (in *ingest) counts() (received, sent uint64) {
	r, s, _ := in.fwd.Stats()
	return r, s
}

func (in *ingest) close() {
	in.mu.Lock()
	for _, sid := range in.subs {
		_ = in.fwd.Unsubscribe(sid)
	}
	in.subs = map[string]uint64{}
	in.mu.Unlock()
	select {
	case <-in.done:
	default:
		close(in.done)
	}
	in.wg.Wait()
	in.fwd.Close()
}
