package canary

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgplatform/platform/internal/jsscan"
	"github.com/msgplatform/platform/internal/parallel"
	"github.com/msgplatform/platform/platform"
)

// Monitor publishes canaries into every topic and queue of its JetStream
// account that does not opt out, and measures per group the canary age
// (see the package doc). It is a prometheus.Collector: register it once.
//
// How the age is computed, from the broker only: the Monitor remembers
// the stream sequence and slot time of every canary it publishes (a
// repeat dropped by the stream's dedupe is acked with the stored
// sequence, so several platformd processes remember the same ones). Every
// quarter interval it lists the consumers of each topic and queue; group
// g has processed canary c on partition p when the ack floor of <g>-p<N>
// is at or above c's sequence (a queue: see queueFloor). A floor below every remembered canary
// (e.g. after a restart) is looked up in the stream (a direct get of the
// partition's last canary up to the floor); if the stream has none left
// (retention, compaction) the age is reported as at least the age of the
// oldest canary remembered, a lower bound (Age.LowerBound).
type Monitor struct {
	js  jetstream.JetStream
	cfg Config
	log *slog.Logger
	pub *platform.Publisher

	// tenant and prefix are set for a tenant account's canary
	// (NewTenant): ages are labelled tenant, and prefix is cut from
	// the stored object names.
	tenant, prefix string

	ageD, tolD *prometheus.Desc
	publishes  *prometheus.CounterVec

	// Used by the loop goroutine only (or by a test driving it).
	objects []canaryObject
	logs    map[canaryPart][]canaryRec // by sequence
	looks   map[canaryCons]canaryLook

	mu   sync.Mutex
	ages map[canaryGroup]Age

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

var _ prometheus.Collector = (*Monitor)(nil)

// Age is one group's (or queue's) canary age.
type Age struct {
	// Tenant is the tenant whose account holds the topic ("" for the
	// platform account).
	Tenant string `json:"tenant,omitempty"`
	// Topic is the topic, or the queue. Group is the group, or the queue
	// again for a queue's workers.
	Topic string `json:"topic"`
	Group string `json:"group"`
	// Processed is the slot time of the newest canary the group has
	// processed on every partition; Partition is the partition holding
	// it back.
	Processed time.Time `json:"processed"`
	Partition int       `json:"partition"`
	// LowerBound: on some partition no processed canary is known, and the
	// age is that of the oldest canary the group has not processed: the
	// true age is at least Age.
	LowerBound bool `json:"lower_bound,omitempty"`
	// Age is how long ago Processed was, when the ages were read.
	Age time.Duration `json:"age"`
	// Stalled: Age is above the tolerance: the group is not processing
	// accepted work.
	Stalled bool `json:"stalled"`
}

type canaryObject struct {
	name, stream string
	partitions   int // 0 for a queue
}

func (o canaryObject) queue() bool { return o.partitions == 0 }

// subject is the stored subject of partition p's canaries.
func (o canaryObject) subject(p int) string {
	if o.queue() {
		return o.name + "." + queueToken
	}
	return platform.StoredSubject(o.name, Key(o.partitions, p), o.partitions)
}

type canaryPart struct {
	stream    string
	partition int // 0 for a queue
}

type canaryRec struct {
	seq    uint64
	at     time.Time // slot time
	looked bool      // found by a lookup, not published by this process
}

type canaryCons struct{ stream, consumer string }

// canaryLook is the last lookup of a consumer's floor.
type canaryLook struct {
	floor uint64
	seq   uint64 // 0: no canary stored at or below floor
}

type canaryGroup struct{ topic, group string }

const ageHelp = "Age of the newest canary the group has processed on every partition (ack floor at or past it); for a queue, group is the queue; tenant is set for a tenant account's groups."

// maxRecs bounds the canaries remembered per partition (a week at
// one a minute); older ones are looked up again if needed.
const maxRecs = 10080

// New returns a Monitor publishing and measuring through js, which
// must be bound to the account holding the topics and queues.
func New(js jetstream.JetStream, cfg Config, log *slog.Logger) (*Monitor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !cfg.Enabled() {
		return nil, fmt.Errorf("%w: canary: interval is 0 (off)", platform.ErrInvalidSpec)
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Monitor{
		js: js, cfg: cfg, log: log.With("component", "canary"), pub: platform.NewPublisher(js, platform.PublisherOptions{}),
		ageD: prometheus.NewDesc("platform_canary_age_seconds", ageHelp, []string{"topic", "group"}, nil),
		tolD: prometheus.NewDesc("platform_canary_tolerance_seconds",
			"Canary age past which a group is not processing accepted work.", nil, nil),
		publishes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "platform_canary_publishes_total",
			Help: "Canaries published, by topic or queue and outcome (ok, duplicate: stored by another platformd, failed).",
		}, []string{"topic", "outcome"}),
		logs: map[canaryPart][]canaryRec{}, looks: map[canaryCons]canaryLook{},
		ages: map[canaryGroup]Age{}, done: make(chan struct{}),
	}, nil
}

// Start reads the current ages once and starts publishing and measuring
// in the background. The first canaries go out at the first multiple of
// the interval at least one interval after Start.
func (c *Monitor) Start(ctx context.Context) error {
	if err := c.check(ctx); err != nil {
		c.log.Warn("platform: canary: first check", "err", err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go c.run(rctx)
	return nil
}

// Close stops publishing and waits for the loop within ctx. Idempotent.
func (c *Monitor) Close(ctx context.Context) error {
	c.once.Do(func() {
		if c.cancel == nil {
			close(c.done)
			return
		}
		c.cancel()
	})
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// firstSlot is the first multiple of interval at least one interval after
// now.
func firstSlot(now time.Time, interval time.Duration) time.Time {
	s := now.Truncate(interval).Add(interval)
	if s.Sub(now) < interval {
		s = s.Add(interval)
	}
	return s
}

func (c *Monitor) run(ctx context.Context) {
	defer close(c.done)
	every := max(c.cfg.Interval/4, MinInterval)
	next := firstSlot(time.Now(), c.cfg.Interval)
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(min(time.Until(next), every)):
		}
		if now := time.Now(); !now.Before(next) {
			c.publish(ctx, next)
			for !next.After(time.Now()) {
				next = next.Add(c.cfg.Interval)
			}
		}
		if err := c.check(ctx); err != nil && ctx.Err() == nil {
			c.log.Debug("platform: canary: check", "err", err)
		}
	}
}

// listObjects lists the topics and queues that take canaries.
func (c *Monitor) listObjects(ctx context.Context) ([]canaryObject, error) {
	var out []canaryObject
	l := c.js.ListStreams(ctx)
	for si := range l.Info() {
		cfg := &si.Config
		if cfg.Mirror != nil || len(cfg.Sources) > 0 {
			continue // a copy: its origin takes the canaries
		}
		switch platform.StreamKind(cfg) {
		case platform.StreamKindTopic:
			t, err := platform.TopicFromStream(cfg)
			if err == nil && t.CanaryEnabled() {
				out = append(out, canaryObject{name: t.Name, stream: cfg.Name, partitions: t.Partitions})
			}
		case platform.StreamKindQueue:
			q, err := platform.QueueFromStream(cfg)
			if err == nil && q.CanaryEnabled() {
				out = append(out, canaryObject{name: q.Name, stream: cfg.Name})
			}
		}
	}
	if err := l.Err(); err != nil {
		return nil, fmt.Errorf("platform: canary: list streams: %w", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// publish sends slot's canaries into every object last listed.
func (c *Monitor) publish(ctx context.Context, slot time.Time) {
	if c.objects == nil {
		objs, err := c.listObjects(ctx)
		if err != nil {
			c.log.Warn("platform: canary: not published", "err", err)
			return
		}
		c.objects = objs
	}
	type result struct {
		name string
		part canaryPart
		seq  uint64
		dup  bool
		err  error
	}
	var (
		mu      sync.Mutex
		results []result
		ops     []func(context.Context) error
	)
	add := func(r result) {
		mu.Lock()
		results = append(results, r)
		mu.Unlock()
	}
	for _, o := range c.objects {
		if o.queue() {
			ops = append(ops, func(ctx context.Context) error {
				actx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				ack, err := c.js.PublishMsg(actx, &nats.Msg{Subject: o.subject(0), Header: header()}, jetstream.WithMsgID(queueID(o.name, slot)))
				r := result{name: o.name, part: canaryPart{o.stream, 0}, err: err}
				if err == nil {
					r.seq, r.dup = ack.Sequence, ack.Duplicate
				}
				add(r)
				return nil
			})
			continue
		}
		for p := range o.partitions {
			ops = append(ops, func(ctx context.Context) error {
				ack, err := c.pub.Publish(ctx, platform.Event{ID: topicID(o.name, p, slot), Topic: o.name, Key: Key(o.partitions, p), Headers: header()})
				add(result{name: o.name, part: canaryPart{o.stream, p}, seq: ack.Sequence, dup: ack.Duplicate, err: err})
				return nil
			})
		}
	}
	_ = parallel.Run(ctx, 16, ops)
	failed := map[string]error{}
	for _, r := range results {
		switch {
		case r.err != nil:
			if ctx.Err() == nil {
				failed[r.name] = r.err
			}
			c.publishes.WithLabelValues(r.name, "failed").Inc()
			continue
		case r.dup:
			c.publishes.WithLabelValues(r.name, "duplicate").Inc()
		default:
			c.publishes.WithLabelValues(r.name, "ok").Inc()
		}
		c.remember(r.part, canaryRec{seq: r.seq, at: slot})
	}
	for name, err := range failed {
		c.log.Warn("platform: canary: publish failed", "object", name, "slot", slot, "err", err)
	}
}

func header() nats.Header { return nats.Header{platform.CanaryHeader: []string{"true"}} }

// remember inserts rec into its partition's log, in sequence order.
func (c *Monitor) remember(part canaryPart, rec canaryRec) {
	recs := c.logs[part]
	i, found := slices.BinarySearchFunc(recs, rec.seq, func(r canaryRec, seq uint64) int {
		switch {
		case r.seq < seq:
			return -1
		case r.seq > seq:
			return 1
		}
		return 0
	})
	if found {
		if !rec.looked {
			recs[i].looked = false // published: the log is complete from here
		}
		return
	}
	c.logs[part] = slices.Insert(recs, i, rec)
}

// newestAtOrBelow returns the index of the newest remembered canary with a
// sequence <= floor, or -1.
func newestAtOrBelow(recs []canaryRec, floor uint64) int {
	return sort.Search(len(recs), func(i int) bool { return recs[i].seq > floor }) - 1
}

// check reads every group's ack floors and updates the ages.
func (c *Monitor) check(ctx context.Context) error {
	objs, err := c.listObjects(ctx)
	if err != nil {
		return err
	}
	c.objects = objs
	ages := map[canaryGroup]Age{}
	seenParts := map[canaryPart]bool{}
	seenCons := map[canaryCons]bool{}
	var errs []error
	for _, o := range objs {
		floors, err := c.floors(ctx, o)
		if err != nil {
			errs = append(errs, err)
			// Keep the previous ages and logs of this object.
			c.mu.Lock()
			for k, a := range c.ages {
				if k.topic == o.name {
					ages[k] = a
				}
			}
			c.mu.Unlock()
			for p := range max(o.partitions, 1) {
				seenParts[canaryPart{o.stream, p}] = true
			}
			continue
		}
		for g, parts := range floors {
			age := Age{Tenant: c.tenant, Topic: c.display(o.name), Group: g}
			if o.queue() {
				age.Group = age.Topic
			}
			known := false
			for p, f := range parts {
				seenCons[canaryCons{o.stream, f.consumer}] = true
				rec, lower, ok := c.processed(ctx, o, p, f)
				if !ok {
					continue
				}
				if !known || rec.at.Before(age.Processed) {
					age.Processed, age.Partition = rec.at, p
				}
				age.LowerBound = age.LowerBound || lower
				known = true
			}
			if known {
				ages[canaryGroup{o.name, g}] = age
			}
		}
		for p := range max(o.partitions, 1) {
			part := canaryPart{o.stream, p}
			seenParts[part] = true
			c.prune(part, floors, p)
		}
	}
	for part := range c.logs {
		if !seenParts[part] {
			delete(c.logs, part)
		}
	}
	for k := range c.looks {
		if !seenCons[k] {
			delete(c.looks, k)
		}
	}
	c.mu.Lock()
	c.ages = ages
	c.mu.Unlock()
	return errors.Join(errs...)
}

type canaryFloor struct {
	consumer string
	floor    uint64
}

// floors returns the ack floor of every group of o, by group and
// partition (a queue: its workers consumer, as group o.name, partition 0).
func (c *Monitor) floors(ctx context.Context, o canaryObject) (map[string]map[int]canaryFloor, error) {
	s, err := c.js.Stream(ctx, o.stream)
	if err != nil {
		return nil, fmt.Errorf("platform: canary: %s: %w", o.name, err)
	}
	out := map[string]map[int]canaryFloor{}
	l := s.ListConsumers(ctx)
	for ci := range l.Info() {
		g, p := o.name, 0
		if o.queue() {
			if ci.Name != platform.QueueConsumer {
				continue
			}
		} else {
			g = ci.Config.Metadata[platform.MetaGroup]
			n, err := strconv.Atoi(ci.Config.Metadata[platform.MetaPartition])
			if g == "" || err != nil || n < 0 || n >= o.partitions || ci.Name != platform.PartitionConsumer(g, n) {
				continue
			}
			p = n
		}
		if out[g] == nil {
			out[g] = map[int]canaryFloor{}
		}
		f := canaryFloor{consumer: ci.Name, floor: ci.AckFloor.Stream}
		if o.queue() {
			f.floor = c.queueFloor(ctx, s, o, f.floor, ci.Delivered.Stream)
		}
		out[g][p] = f
	}
	if err := l.Err(); err != nil {
		return nil, fmt.Errorf("platform: canary: %s: list consumers: %w", o.name, err)
	}
	return out, nil
}

// queueFloor is the floor a queue's canaries are measured against. Jobs
// are independent, so one long job (renewed up to the workers' MaxLease)
// holding the ack floor does not mean the workers stopped taking work: a
// queue has processed a canary once a worker claimed it (the consumer
// delivered past it) and it is gone from the work-queue stream (acked).
// It checks at most the 3 newest canaries delivered above the ack floor.
func (c *Monitor) queueFloor(ctx context.Context, s jetstream.Stream, o canaryObject, ackFloor, delivered uint64) uint64 {
	recs := c.logs[canaryPart{o.stream, 0}]
	for i, n := newestAtOrBelow(recs, delivered), 0; i >= 0 && recs[i].seq > ackFloor && n < 3; i, n = i-1, n+1 {
		_, err := s.GetMsg(ctx, recs[i].seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return recs[i].seq
		}
		if err != nil {
			c.log.Debug("platform: canary: read queue canary", "queue", o.name, "seq", recs[i].seq, "err", err)
			break
		}
	}
	return ackFloor
}

// processed returns the newest canary of partition p at or below the
// consumer's ack floor. lower is true when none is known and rec is the
// oldest canary above the floor instead (the age is at least its age);
// ok is false when no canary of the partition is known at all.
func (c *Monitor) processed(ctx context.Context, o canaryObject, p int, f canaryFloor) (rec canaryRec, lower, ok bool) {
	part := canaryPart{o.stream, p}
	recs := c.logs[part]
	if i := newestAtOrBelow(recs, f.floor); i >= 0 && !recs[i].looked {
		// Published by this process: every later canary up to the
		// floor would be remembered too.
		return recs[i], false, true
	}
	// Nothing remembered at or below the floor, or only a canary found
	// by an earlier lookup (there may be newer ones in between): ask the
	// stream, once per floor.
	key := canaryCons{o.stream, f.consumer}
	look, seen := c.looks[key]
	if !seen || look.floor != f.floor {
		found, err := c.lookup(ctx, o, p, f.floor)
		if err != nil {
			c.log.Debug("platform: canary: lookup", "object", o.name, "partition", p, "err", err)
		} else {
			look = canaryLook{floor: f.floor, seq: found.seq}
			c.looks[key] = look
			if found.seq > 0 {
				c.remember(part, found)
			}
		}
		recs = c.logs[part]
	}
	if i := newestAtOrBelow(recs, f.floor); i >= 0 {
		return recs[i], false, true
	}
	if len(recs) > 0 {
		return recs[0], true, true
	}
	return canaryRec{}, false, false
}

// lookup finds the newest canary of partition p stored at or below
// floor: one batched direct get ({"multi_last":[subject],"up_to_seq":
// floor}), served by any current replica. seq 0: none stored.
func (c *Monitor) lookup(ctx context.Context, o canaryObject, p int, floor uint64) (canaryRec, error) {
	if floor == 0 {
		return canaryRec{}, nil
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	msgs, _, err := jsscan.DirectBatch(lctx, c.js, o.stream, struct {
		MultiLast []string `json:"multi_last"`
		UpToSeq   uint64   `json:"up_to_seq"`
		Batch     int      `json:"batch"`
	}{MultiLast: []string{o.subject(p)}, UpToSeq: floor, Batch: 1})
	if err != nil {
		return canaryRec{}, fmt.Errorf("platform: canary: %w", err)
	}
	if len(msgs) == 0 {
		return canaryRec{}, nil
	}
	msg := msgs[len(msgs)-1]
	seq, err := jsscan.Sequence(msg)
	if err != nil {
		return canaryRec{}, fmt.Errorf("platform: canary: %w", err)
	}
	at, ok := slotOf(msg.Header.Get(jetstream.MsgIDHeader))
	if !ok {
		if at, err = time.Parse(time.RFC3339Nano, msg.Header.Get(jetstream.TimeStampHeaer)); err != nil {
			return canaryRec{}, fmt.Errorf("platform: canary: direct get %s: no time for seq %d", o.stream, seq)
		}
	}
	return canaryRec{seq: seq, at: at, looked: true}, nil
}

// prune forgets the canaries of partition p every group has processed
// past (keeping the newest each group processed), and bounds the log.
func (c *Monitor) prune(part canaryPart, floors map[string]map[int]canaryFloor, p int) {
	recs := c.logs[part]
	if len(recs) == 0 {
		return
	}
	keep := len(recs) - 1 // no group: the newest is enough
	for _, parts := range floors {
		f, ok := parts[p]
		if !ok {
			continue
		}
		keep = min(keep, max(newestAtOrBelow(recs, f.floor), 0))
	}
	keep = max(keep, len(recs)-maxRecs)
	if keep > 0 {
		c.logs[part] = slices.Clone(recs[keep:])
	}
}

// Ages returns every group's canary age as of now, sorted by topic and
// group.
func (c *Monitor) Ages() []Age {
	now := time.Now()
	tol := c.cfg.EffectiveTolerance()
	c.mu.Lock()
	out := make([]Age, 0, len(c.ages))
	for _, a := range c.ages {
		a.Age = max(now.Sub(a.Processed), 0)
		a.Stalled = a.Age > tol
		out = append(out, a)
	}
	c.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Group < out[j].Group
	})
	return out
}

// NewTenant returns the Monitor of a tenant's account: js is bound
// to that account (a platform service user of it), and its topics and
// queues are stored under prefix (tenancy.StoredName("")): the canary
// publishes straight to their stored subjects, so canaries never pass the
// tenant's ingest (no publish-rate quota, not counted as the tenant's
// accepted publishes). Ages carry Tenant and the tenant's own object
// names; export them with CollectAges (the platform Monitor is the one
// registered).
func NewTenant(js jetstream.JetStream, cfg Config, log *slog.Logger, tenant, prefix string) (*Monitor, error) {
	if tenant == "" {
		return nil, fmt.Errorf("%w: canary: tenant name is empty", platform.ErrInvalidSpec)
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	c, err := New(js, cfg, log.With("tenant", tenant))
	if err != nil {
		return nil, err
	}
	c.tenant, c.prefix = tenant, prefix
	c.ageD = prometheus.NewDesc("platform_canary_age_seconds", ageHelp, []string{"topic", "group"}, prometheus.Labels{"tenant": tenant})
	return c, nil
}

// display is the name of a stored object as its owner knows it.
func (c *Monitor) display(name string) string { return strings.TrimPrefix(name, c.prefix) }

// CollectAges sends platform_canary_age_seconds of every group (labelled
// tenant for a tenant's Monitor) and nothing else.
func (c *Monitor) CollectAges(ch chan<- prometheus.Metric) {
	for _, a := range c.Ages() {
		ch <- prometheus.MustNewConstMetric(c.ageD, prometheus.GaugeValue, a.Age.Seconds(), a.Topic, a.Group)
	}
}

// Describe implements prometheus.Collector.
func (c *Monitor) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.ageD
	ch <- c.tolD
	c.publishes.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *Monitor) Collect(ch chan<- prometheus.Metric) {
	c.CollectAges(ch)
	ch <- prometheus.MustNewConstMetric(c.tolD, prometheus.GaugeValue, c.cfg.EffectiveTolerance().Seconds())
	c.publishes.Collect(ch)
}
