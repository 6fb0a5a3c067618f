package consumer

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/dlq"
)

// Metrics is the consumer runtime's Prometheus collector. Members
// and Workers given it in their config count into it; on every scrape it
// also reads from the broker, per group and partition, the events pending
// and the age of the oldest unprocessed one (by the broker's append time,
// not the producer's clock), and per topic or queue the DLQ depth and the
// age of its oldest entry (platform_consumer_dlq_depth and
// platform_consumer_dlq_oldest_seconds: the DLQs this process consumes;
// platformd exports every DLQ's, with its owner, as platform_dlq_* in
// redrive/metrics.go). Register it once: reg.MustRegister(m).
//
// Processing rate is rate(platform_consumer_processed_total).
type Metrics struct {
	processedC *prometheus.CounterVec
	retriesC   *prometheus.CounterVec
	deadC      *prometheus.CounterVec
	dlqFailC   *prometheus.CounterVec
	budgetC    *prometheus.CounterVec
	rebalances *prometheus.CounterVec
	handlerH   *prometheus.HistogramVec
	canaryG    *prometheus.GaugeVec // canary_runtime.go
	// redriveSkippedC counts redriven events for other groups
	// (consumer_redrive.go).
	redriveSkippedC *prometheus.CounterVec
	// reclaimedC counts jobs of lost workers given back early
	// (workqueue_session.go).
	reclaimedC *prometheus.CounterVec
	// heldC counts jobs that reached a worker beyond its free slots
	// (workqueue.go, hold).
	heldC *prometheus.CounterVec
	// resyncsC counts partition resets after a lost delivery
	// (consumer_partition.go, inSequence).
	resyncsC     *prometheus.CounterVec
	pendingD     *prometheus.Desc
	oldestD      *prometheus.Desc
	dlqDepthD    *prometheus.Desc
	dlqOldestD   *prometheus.Desc
	scrapeBudget time.Duration

	mu      sync.Mutex
	members map[*Member]struct{}
	workers map[*Workers]struct{}
}

var _ prometheus.Collector = (*Metrics)(nil)

// NewMetrics returns an empty collector.
func NewMetrics() *Metrics {
	gp := []string{"group", "partition"}
	gpc := []string{"group", "partition", "class"}
	return &Metrics{
		processedC: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "platform_consumer_processed_total", Help: "Events handled and acknowledged."}, gp),
		retriesC:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "platform_consumer_retries_total", Help: "Deliveries failed and scheduled again, by reason class."}, gpc),
		deadC:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "platform_consumer_dead_lettered_total", Help: "Events copied to the DLQ, by reason class."}, gpc),
		dlqFailC:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "platform_consumer_dlq_write_failures_total", Help: "Dead-letter copies that failed (the event is retried)."}, []string{"group"}),
		budgetC:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "platform_consumer_retry_budget_exhausted_total", Help: "Retries delayed to the longest backoff because the retry budget was empty."}, []string{"group"}),
		rebalances: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "platform_group_rebalances_total", Help: "Assignments written by this process's members."}, []string{"group"}),
		handlerH: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "platform_consumer_handler_seconds", Help: "Handler duration.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10)}, gp),
		canaryG:         newCanaryGauge(),
		redriveSkippedC: newRedriveSkippedCounter(),
		reclaimedC: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "platform_queue_jobs_reclaimed_total",
			Help: "Jobs of a worker whose session lapsed (crash, lost connection) given back before their lease."}, []string{"queue"}),
		heldC: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "platform_queue_jobs_held_total",
			Help: "Jobs that reached a worker with no free slot for them (a pull request presumed gone that was not); each waited for a slot with its lease renewed."}, []string{"queue"}),
		resyncsC: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "platform_consumer_lost_delivery_resets_total",
			Help: "Partitions reset to their ack floor because a delivery went to a pull request the runner does not read (the key's order is kept; the events come again)."}, gp),
		pendingD:     prometheus.NewDesc("platform_consumer_pending", "Events not yet acknowledged (undelivered + in flight).", gp, nil),
		oldestD:      prometheus.NewDesc("platform_consumer_oldest_unprocessed_seconds", "Age of the oldest unacknowledged event by broker append time.", gp, nil),
		dlqDepthD:    prometheus.NewDesc("platform_consumer_dlq_depth", "Entries in the DLQ of an object this process consumes.", []string{"object"}, nil),
		dlqOldestD:   prometheus.NewDesc("platform_consumer_dlq_oldest_seconds", "Age of the oldest entry in the DLQ of an object this process consumes.", []string{"object"}, nil),
		scrapeBudget: 3 * time.Second,
		members:      map[*Member]struct{}{},
		workers:      map[*Workers]struct{}{},
	}
}

func (c *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{c.processedC, c.retriesC, c.deadC, c.dlqFailC, c.budgetC, c.rebalances, c.handlerH, c.canaryG, c.redriveSkippedC, c.reclaimedC, c.heldC, c.resyncsC}
}

// Describe implements prometheus.Collector.
func (c *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, col := range c.collectors() {
		col.Describe(ch)
	}
	ch <- c.pendingD
	ch <- c.oldestD
	ch <- c.dlqDepthD
	ch <- c.dlqOldestD
}

// Collect implements prometheus.Collector.
func (c *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, col := range c.collectors() {
		col.Collect(ch)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.scrapeBudget)
	defer cancel()
	type groupRef struct {
		js         jetstream.JetStream
		topic      string
		partitions int
	}
	groups := map[string]groupRef{}
	objects := map[string]jetstream.JetStream{}
	c.mu.Lock()
	for m := range c.members {
		groups[m.cfg.Group] = groupRef{m.js, m.topic.Name, m.topic.Partitions}
		objects[m.topic.Name] = m.js
	}
	for w := range c.workers {
		groups[w.cfg.Queue] = groupRef{w.js, w.cfg.Queue, 0}
		objects[w.cfg.Queue] = w.js
	}
	c.mu.Unlock()
	for g, ref := range groups {
		if ref.partitions == 0 {
			c.collectConsumer(ctx, ch, ref.js, ref.topic, platform.QueueConsumer, "", g, "")
			continue
		}
		for p := range ref.partitions {
			c.collectConsumer(ctx, ch, ref.js, ref.topic, platform.PartitionConsumer(g, p), platform.PartitionSubject(ref.topic, p), g, strconv.Itoa(p))
		}
	}
	for obj, js := range objects {
		s, err := js.Stream(ctx, platform.DLQStream(obj))
		if err != nil {
			continue
		}
		st := s.CachedInfo().State
		ch <- prometheus.MustNewConstMetric(c.dlqDepthD, prometheus.GaugeValue, float64(st.Msgs), obj)
		age := 0.0
		if st.Msgs > 0 {
			age = time.Since(st.FirstTime).Seconds()
		}
		ch <- prometheus.MustNewConstMetric(c.dlqOldestD, prometheus.GaugeValue, age, obj)
	}
}

func (c *Metrics) collectConsumer(ctx context.Context, ch chan<- prometheus.Metric, js jetstream.JetStream, object, consumer, filter, group, partition string) {
	cons, err := js.Consumer(ctx, platform.StreamName(object), consumer)
	if err != nil {
		return
	}
	info := cons.CachedInfo()
	pending := float64(info.NumPending) + float64(info.NumAckPending)
	ch <- prometheus.MustNewConstMetric(c.pendingD, prometheus.GaugeValue, pending, group, partition)
	age := 0.0
	if pending > 0 {
		if s, err := js.Stream(ctx, platform.StreamName(object)); err == nil {
			var opts []jetstream.GetMsgOpt
			if filter != "" {
				opts = append(opts, jetstream.WithGetMsgSubject(filter))
			}
			if m, err := s.GetMsg(ctx, info.AckFloor.Stream+1, opts...); err == nil {
				age = time.Since(m.Time).Seconds()
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(c.oldestD, prometheus.GaugeValue, age, group, partition)
}

func (c *Metrics) addMember(m *Member) {
	c.mu.Lock()
	c.members[m] = struct{}{}
	c.mu.Unlock()
}

func (c *Metrics) removeMember(m *Member) {
	c.mu.Lock()
	delete(c.members, m)
	c.mu.Unlock()
}

func (c *Metrics) addWorkers(w *Workers) {
	c.mu.Lock()
	c.workers[w] = struct{}{}
	c.mu.Unlock()
}

func (c *Metrics) removeWorkers(w *Workers) {
	c.mu.Lock()
	delete(c.workers, w)
	c.mu.Unlock()
}

// The counting methods below are no-ops on a nil *Metrics.

func (c *Metrics) processed(group, partition string) {
	if c != nil {
		c.processedC.WithLabelValues(group, partition).Inc()
	}
}

func (c *Metrics) handled(group, partition string, d time.Duration) {
	if c != nil {
		c.handlerH.WithLabelValues(group, partition).Observe(d.Seconds())
	}
}

func (c *Metrics) retried(group, partition string, class dlq.ErrorClass) {
	if c != nil {
		c.retriesC.WithLabelValues(group, partition, string(class)).Inc()
	}
}

func (c *Metrics) deadLettered(group, partition string, class dlq.ErrorClass) {
	if c != nil {
		c.deadC.WithLabelValues(group, partition, string(class)).Inc()
	}
}

func (c *Metrics) dlqFailed(group string) {
	if c != nil {
		c.dlqFailC.WithLabelValues(group).Inc()
	}
}

func (c *Metrics) budgetExhausted(group string) {
	if c != nil {
		c.budgetC.WithLabelValues(group).Inc()
	}
}

func (c *Metrics) resynced(group, partition string) {
	if c != nil {
		c.resyncsC.WithLabelValues(group, partition).Inc()
	}
}

func (c *Metrics) rebalanced(group string) {
	if c != nil {
		c.rebalances.WithLabelValues(group).Inc()
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
