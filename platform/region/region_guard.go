package region

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/platform"
)

// The residency guard: what stops a cross-border mirror or source of a
// resident topic created directly through the JetStream API (the nats CLI,
// any client of the platform account), bypassing Regions.CheckStream.
// JetStream has no admission hook, so the guard acts on the server's
// advisories of every stream created or updated, in every region:
//
//   - a created stream whose mirror or any source reads a topic resident
//     in another region (or one of its DLQ streams) is deleted;
//   - an updated stream that gained such a source loses that source (the
//     rest of the stream is kept);
//   - a push consumer of a stream holding resident data whose deliver
//     subject the link carries is deleted (its deliveries in the
//     milliseconds before are not undone);
//   - every refusal is appended to AuditStream (subject
//     AuditSubject.<region>.<stream>) and logged.
//
// Invariant: such a stream never holds a resident event (the link's deny
// list, LinkDeny, refuses the consumer it needs); the guard makes the
// starved copy a visible refusal. With GuardOptions.Gate the residency
// gate (region_gate.go) refuses most violations at the request itself and
// the guard is its backstop. Design: docs/design/residency.md.

// AuditStream is the stream, in every region, holding the guard's
// refusals (Refusal, JSON) under
// AuditSubject.<region>.<stream>.
const (
	AuditStream  = "platform_residency_audit"
	AuditSubject = "platform.residency.audit"
)

// Refusal is one stream the guard refused.
type Refusal struct {
	Region string `json:"region"`
	Stream string `json:"stream"`
	// Action is what was done to the stream: "created", "updated" or
	// "consumer created" (a push consumer, see checkConsumer); or
	// what was asked, "create" or "update", for a request the gate
	// refused.
	Action string `json:"action"`
	// Remedy is what the guard did: "deleted", "sources removed",
	// "republish removed", "sources and republish removed" or "reported"
	// (nothing to undo: a residency declared on a stream already copied
	// abroad) or "consumer deleted"; or
	// "refused" (the gate answered the request with an error; nothing was
	// created or changed).
	Remedy   string    `json:"remedy"`
	Problems []string  `json:"problems"`
	At       time.Time `json:"at"`
	// Error is set when the remedy itself failed (the stream may remain;
	// it still holds no resident event, see the file comment).
	Error string `json:"error,omitempty"`
}

// GuardOptions configure StartGuard.
type GuardOptions struct {
	// Logger receives refusals and errors (nil: discard).
	Logger *slog.Logger
	// Replicas of each region's audit stream (0: 1).
	Replicas int
	// OnRefusal, if set, is called after each refusal (tests, metrics).
	OnRefusal func(Refusal)
	// ThroughLink: a mirror or source in a JetStream domain that is none
	// of the guard's regions is checked through the link, taking that
	// domain to be a region of the same name (the default: a region's
	// domain is its name). platformd in mode node runs the guard with its
	// own region only and this set; without it such a source is left to
	// the link's deny list and the residency report.
	ThroughLink bool
	// Gate, if set, runs the residency gate: cross-border copies are
	// refused at the JetStream API request itself (see region_gate.go).
	Gate *GateOptions
}

// Guard watches every region for streams that would carry a
// resident topic across the border and removes them (see the file
// comment). Stop ends it.
type Guard struct {
	rs      Regions
	opts    GuardOptions
	log     *slog.Logger
	subs    []*nats.Subscription
	events  chan guardEvent
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	refused atomic.Int64
	// gated counts the refusals at the request (the gate's).
	gated atomic.Int64
	// rsMu guards rs against learnDomains while the gate reads it.
	rsMu sync.Mutex
	gate *gate
	// auditReady: regions whose audit stream exists (worker goroutine only).
	auditReady map[string]bool
	// ctx ends with Stop: it bounds the checks in progress.
	ctx    context.Context
	cancel context.CancelFunc
}

type guardEvent struct {
	region *Region
	stream string
	// consumer, if set, is a consumer of stream just created: checked
	// by checkConsumer.
	consumer string
	action   string // created, updated, existing (the start-up sweep)
	// refusal, if set, is a request the gate refused: audited only.
	refusal *Refusal
}

// StartGuard subscribes to the stream advisories of every
// region and returns once the subscriptions are in place; refusals then
// happen in the background. In the background it also creates each
// region's audit stream (retrying while a region is not ready: a guard
// never stops its platformd from starting) and sweeps the streams that
// exist already (a violation made while no guard ran).
func StartGuard(ctx context.Context, rs Regions, opts GuardOptions) (*Guard, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("platform: residency guard: %w", err)
	}
	g := &Guard{rs: append(Regions(nil), rs...), opts: opts, log: opts.Logger,
		events: make(chan guardEvent, 1024), stop: make(chan struct{}), done: make(chan struct{}),
		auditReady: map[string]bool{}}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.opts.Replicas == 0 {
		g.opts.Replicas = 1
	}
	for i := range rs {
		r := &rs[i]
		for _, action := range []string{"created", "updated"} {
			subj := "$JS.EVENT.ADVISORY.STREAM." + strings.ToUpper(action) + ".*"
			sub, err := r.JS.Conn().Subscribe(subj, g.onAdvisory(r, action))
			if err != nil {
				g.unsubscribe()
				g.cancel()
				return nil, fmt.Errorf("platform: residency guard: subscribe %s in %s: %w", subj, r.Name, err)
			}
			g.subs = append(g.subs, sub)
		}
		sub, err := r.JS.Conn().Subscribe("$JS.EVENT.ADVISORY.CONSUMER.CREATED.*.*", g.onConsumerAdvisory(r))
		if err != nil {
			g.unsubscribe()
			g.cancel()
			return nil, fmt.Errorf("platform: residency guard: subscribe consumer advisories in %s: %w", r.Name, err)
		}
		g.subs = append(g.subs, sub)
		if err := r.JS.Conn().FlushTimeout(10 * time.Second); err != nil {
			g.unsubscribe()
			g.cancel()
			return nil, fmt.Errorf("platform: residency guard in %s: %w", r.Name, err)
		}
	}
	if opts.Gate != nil {
		gt, err := startGate(g, append(Regions(nil), rs...), *opts.Gate)
		if err != nil {
			g.unsubscribe()
			g.cancel()
			return nil, err
		}
		g.gate = gt
	}
	go g.run(rs)
	return g, nil
}

// ensureAudit creates region r's audit stream unless done already.
func (g *Guard) ensureAudit(ctx context.Context, r *Region) error {
	if g.auditReady[r.Name] {
		return nil
	}
	if _, err := r.JS.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        AuditStream,
		Description: "platform residency guard: streams refused for carrying a resident topic out of its region",
		Subjects:    []string{AuditSubject + "." + r.Name + ".>"},
		Replicas:    g.opts.Replicas,
		MaxAge:      90 * 24 * time.Hour,
		Duplicates:  10 * time.Minute,
	}); err != nil {
		return fmt.Errorf("platform: residency audit stream in %s: %w", r.Name, err)
	}
	g.auditReady[r.Name] = true
	return nil
}

// startup creates the audit streams and queues every existing stream,
// best effort: a region that does not answer yet gets its audit stream
// with its first refusal (audit), and its streams are checked as their
// advisories arrive.
func (g *Guard) startup(rs Regions) {
	for i := range rs {
		r := &rs[i]
		ctx, cancel := context.WithTimeout(g.ctx, 10*time.Second)
		if err := g.ensureAudit(ctx, r); err != nil {
			g.log.Warn("residency guard: audit stream not ready (created with the first refusal)", "region", r.Name, "err", err)
		}
		l := r.JS.StreamNames(ctx)
		for name := range l.Name() {
			g.enqueue(guardEvent{region: r, stream: name, action: "existing"})
		}
		if err := l.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
			g.log.Warn("residency guard: sweep of existing streams incomplete", "region", r.Name, "err", err)
		}
		cancel()
	}
}

// onAdvisory queues the stream an advisory of region r names. Advisories
// of the other region can arrive over the link (one account on both
// sides): those carry the other domain and are left to that region's
// subscription.
func (g *Guard) onAdvisory(r *Region, action string) nats.MsgHandler {
	return func(m *nats.Msg) {
		var adv struct {
			Stream string `json:"stream"`
			Domain string `json:"domain"`
		}
		if err := json.Unmarshal(m.Data, &adv); err != nil || adv.Stream == "" {
			return
		}
		if adv.Domain != "" && adv.Domain != r.Domain {
			return
		}
		g.enqueue(guardEvent{region: r, stream: adv.Stream, action: action})
	}
}

// onConsumerAdvisory queues the consumer a creation advisory of region r
// names (advisories of the other region over the link are left to that
// region's subscription).
func (g *Guard) onConsumerAdvisory(r *Region) nats.MsgHandler {
	return func(m *nats.Msg) {
		var adv struct {
			Stream   string `json:"stream"`
			Consumer string `json:"consumer"`
			Domain   string `json:"domain"`
		}
		if err := json.Unmarshal(m.Data, &adv); err != nil || adv.Stream == "" || adv.Consumer == "" {
			return
		}
		if adv.Domain != "" && adv.Domain != r.Domain {
			return
		}
		g.enqueue(guardEvent{region: r, stream: adv.Stream, consumer: adv.Consumer, action: "consumer created"})
	}
}

// checkConsumer deletes e's consumer if it is a push consumer of a stream
// holding resident data whose deliver subject lies outside that data's
// resident subjects: its deliveries would be published on a subject the
// region link carries. Deliveries made before the deletion (the
// milliseconds since the advisory, if that subject had interest) are not
// undone; the refusal is audited (remedy "consumer deleted"). A deliver
// subject under SourceLinkDeny (a stream sourcing it in the region) is
// left alone, as no link carries it. A deliver subject under _INBOX. is
// left alone too: that is how in-region tools read
// a stream with an ephemeral push consumer (nats kv watch, legacy ordered
// consumers), and it is no defence against a client that names one on
// purpose (see the README's residency section: not covered).
func (g *Guard) checkConsumer(ctx context.Context, e guardEvent) {
	s, err := e.region.JS.Stream(ctx, e.stream)
	if err != nil {
		return
	}
	cfg := s.CachedInfo().Config
	g.rsMu.Lock()
	rs := append(Regions(nil), g.rs...)
	g.rsMu.Unlock()
	res, err := rs.residencyOf(ctx, e.region, &cfg)
	if err != nil || res.Residency == "" {
		return
	}
	c, err := s.PushConsumer(ctx, e.consumer)
	if err != nil {
		return // gone, or a pull consumer (ErrNotPushConsumer)
	}
	info := c.CachedInfo()
	deliver := info.Config.DeliverSubject
	covered := append(slices.Clone(res.Covered), cfg.Subjects...)
	covered = append(covered, SourceLinkDeny)
	if deliver == "" || strings.HasPrefix(deliver, "_INBOX.") || slices.ContainsFunc(covered, func(p string) bool { return subjectWithin(deliver, p) }) {
		return
	}
	ref := Refusal{Region: e.region.Name, Stream: e.stream, Action: e.action, Remedy: "consumer deleted", At: time.Now().UTC(),
		Problems: []string{fmt.Sprintf("%s is resident in %s: push consumer %s of stream %s delivers on %s, a subject the region link carries", res.What, res.Residency, e.consumer, e.stream, deliver)}}
	if err := s.DeleteConsumer(ctx, e.consumer); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		ref.Error = err.Error()
	}
	g.refused.Add(1)
	g.audit(ctx, e.region, ref, fmt.Sprintf("%s/%s/%s/consumer/%d", ref.Region, ref.Stream, e.consumer, info.Created.UnixNano()))
	if g.opts.OnRefusal != nil {
		g.opts.OnRefusal(ref)
	}
}

func (g *Guard) enqueue(e guardEvent) {
	select {
	case g.events <- e:
	default:
		g.log.Error("residency guard: queue full, stream not checked (the residency report still flags it)", "region", e.region.Name, "stream", e.stream)
	}
}

// run creates the audit streams, sweeps, then checks queued streams one
// at a time until Stop.
func (g *Guard) run(rs Regions) {
	defer close(g.done)
	g.startup(rs)
	for {
		select {
		case <-g.stop:
			return
		case e := <-g.events:
			ctx, cancel := context.WithTimeout(g.ctx, 15*time.Second)
			if e.refusal != nil {
				g.audit(ctx, e.region, *e.refusal, fmt.Sprintf("%s/%s/%s/%d", e.refusal.Region, e.refusal.Stream, e.refusal.Action, e.refusal.At.UnixNano()))
				if g.opts.OnRefusal != nil {
					g.opts.OnRefusal(*e.refusal)
				}
			} else if e.consumer != "" {
				g.checkConsumer(ctx, e)
			} else {
				g.check(ctx, e)
			}
			cancel()
		}
	}
}

// check refuses e's stream if it carries a resident topic out of its
// region (see the file comment).
func (g *Guard) check(ctx context.Context, e guardEvent) {
	if e.stream == AuditStream {
		return
	}
	s, err := e.region.JS.Stream(ctx, e.stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return
	}
	if err != nil {
		g.log.Error("residency guard: read stream", "region", e.region.Name, "stream", e.stream, "err", err)
		return
	}
	info := s.CachedInfo()
	cfg := info.Config
	g.learnDomains(e.region, cfg)
	vs, _, err := g.rs.residencyViolationsOf(ctx, e.region.Name, cfg, e.action != "existing")
	if err != nil {
		g.log.Error("residency guard: check stream", "region", e.region.Name, "stream", e.stream, "err", err)
		return
	}
	if len(vs) == 0 {
		return
	}
	ref := Refusal{Region: e.region.Name, Stream: e.stream, Action: e.action, At: time.Now().UTC()}
	mirror, republish := false, false
	bad := map[*jetstream.StreamSource]bool{}
	for _, v := range vs {
		ref.Problems = append(ref.Problems, v.Problem)
		mirror = mirror || v.Mirror
		republish = republish || v.Republish
		if v.Source != nil {
			bad[v.Source] = true
		}
	}
	if !mirror && len(bad) == 0 && !republish {
		// Nothing to undo here (a residency declared on a stream copied
		// abroad): recorded for the report; the link denies the stream.
		ref.Remedy = "reported"
	} else if !mirror && len(bad) == 0 {
		// Only a republish: the stream itself (a resident topic's own,
		// say) is kept, whatever the action.
		ref.Remedy = "republish removed"
		cfg.RePublish = nil
		if _, err := e.region.JS.UpdateStream(ctx, cfg); err != nil {
			ref.Error = err.Error()
		}
	} else if e.action == "updated" && !mirror {
		ref.Remedy = "sources removed"
		if republish {
			ref.Remedy = "republish removed"
			if len(bad) > 0 {
				ref.Remedy = "sources and republish removed"
			}
			cfg.RePublish = nil
		}
		kept := cfg.Sources[:0:0]
		for _, src := range cfg.Sources {
			if !bad[src] {
				kept = append(kept, src)
			}
		}
		cfg.Sources = kept
		if _, err := e.region.JS.UpdateStream(ctx, cfg); err != nil {
			ref.Error = err.Error()
		}
	} else {
		ref.Remedy = "deleted"
		if err := e.region.JS.DeleteStream(ctx, e.stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			ref.Error = err.Error()
		}
	}
	g.refused.Add(1)
	// One record per refusal even when several guards (one per platformd
	// node of the region) act on the same advisory.
	g.audit(ctx, e.region, ref, fmt.Sprintf("%s/%s/%s/%d", ref.Region, ref.Stream, ref.Action, info.Created.UnixNano()))
	if g.opts.OnRefusal != nil {
		g.opts.OnRefusal(ref)
	}
}

// learnDomains adds, with ThroughLink, a region reached through the link
// (via r's connection) for every domain cfg reads from that the guard does
// not know.
func (g *Guard) learnDomains(r *Region, cfg jetstream.StreamConfig) {
	if !g.opts.ThroughLink {
		return
	}
	srcs := append([]*jetstream.StreamSource(nil), cfg.Sources...)
	if cfg.Mirror != nil {
		srcs = append(srcs, cfg.Mirror)
	}
	for _, src := range srcs {
		d := sourceDomain(src)
		if d == "" || g.rs.byDomain(d, nil) != nil {
			continue
		}
		js, err := jetstream.NewWithDomain(r.JS.Conn(), d)
		if err != nil {
			g.log.Error("residency guard: reach domain through the link", "domain", d, "err", err)
			continue
		}
		g.rsMu.Lock()
		g.rs = append(g.rs, Region{Name: d, Domain: d, JS: js})
		g.rsMu.Unlock()
	}
}

// checkRegions returns the regions a check of a stream in r reads from:
// the guard's, and with ThroughLink every other domain reached through
// the link (the gate's view; learnDomains is the worker's).
func (g *Guard) checkRegions(r *Region, cfg jetstream.StreamConfig) Regions {
	g.rsMu.Lock()
	rs := append(Regions(nil), g.rs...)
	g.rsMu.Unlock()
	if !g.opts.ThroughLink {
		return rs
	}
	srcs := append([]*jetstream.StreamSource(nil), cfg.Sources...)
	if cfg.Mirror != nil {
		srcs = append(srcs, cfg.Mirror)
	}
	for _, src := range srcs {
		d := sourceDomain(src)
		if d == "" || rs.byDomain(d, nil) != nil {
			continue
		}
		if js, err := jetstream.NewWithDomain(r.JS.Conn(), d); err == nil {
			rs = append(rs, Region{Name: d, Domain: d, JS: js})
		}
	}
	return rs
}

// audit appends ref to the region's audit stream (deduplicated by id) and
// logs it.
func (g *Guard) audit(ctx context.Context, r *Region, ref Refusal, id string) {
	msg := "residency guard: refused stream"
	if ref.Remedy == "refused" {
		msg = "residency gate: refused request"
	}
	g.log.Warn(msg, "region", ref.Region, "stream", ref.Stream, "action", ref.Action,
		"remedy", ref.Remedy, "problems", strings.Join(ref.Problems, "; "), "error", ref.Error)
	b, err := json.Marshal(ref)
	if err != nil {
		return
	}
	err = g.ensureAudit(ctx, r)
	if err == nil {
		_, err = r.JS.Publish(ctx, AuditSubject+"."+r.Name+"."+ref.Stream, b, jetstream.WithMsgID(id))
	}
	if err != nil {
		g.log.Error("residency guard: audit record not written", "region", r.Name, "stream", ref.Stream, "err", err)
	}
}

// Refused returns how many streams the guard has refused, at the request
// (the gate) or after the fact.
func (g *Guard) Refused() int64 { return g.refused.Load() }

// RefusedAtRequest returns how many of those the gate refused at the
// request (nothing was created).
func (g *Guard) RefusedAtRequest() int64 { return g.gated.Load() }

// Stop unsubscribes and waits for the check in progress.
func (g *Guard) Stop() {
	g.once.Do(func() {
		if g.gate != nil {
			g.gate.close()
		}
		g.unsubscribe()
		g.cancel()
		close(g.stop)
		<-g.done
	})
}

func (g *Guard) unsubscribe() {
	for _, s := range g.subs {
		_ = s.Unsubscribe()
	}
	g.subs = nil
}

// Audit reads the refusals recorded in region's audit stream.
func (rs Regions) Audit(ctx context.Context, region string) ([]Refusal, error) {
	r := rs.byName(region)
	if r == nil {
		return nil, fmt.Errorf("%w: no region %q (regions: %s)", platform.ErrNotFound, region, strings.Join(rs.names(), ", "))
	}
	s, err := r.JS.Stream(ctx, AuditStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("platform: residency audit in %s: %w", region, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("platform: residency audit in %s: %w", region, err)
	}
	var out []Refusal
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return out, fmt.Errorf("platform: residency audit in %s: read %d: %w", region, seq, err)
		}
		var ref Refusal
		if err := json.Unmarshal(m.Data, &ref); err != nil {
			return out, fmt.Errorf("platform: residency audit in %s: record %d: %w", region, seq, err)
		}
		out = append(out, ref)
	}
	return out, nil
}
