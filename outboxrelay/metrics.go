package outboxrelay

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Publish outcomes, the values of the "outcome" metric label.
const (
	OutcomeOK        = "ok"        // stored
	OutcomeDuplicate = "duplicate" // the stream had it already (same Nats-Msg-Id)
	OutcomeError     = "error"     // refused: not stored (no stream leader, stream error)
	OutcomeUnknown   = "unknown"   // no ack in time: may or may not be stored
)

// Counts are a relay's publishes by outcome since it started.
type Counts struct {
	OK, Duplicate, Error, Unknown uint64
	// Batched is how many of the OK were stored through fast batches
	// (fastbatch.go); BatchRetried how many publishes a fast batch did
	// not store (it ended before them) and were published again singly.
	Batched, BatchRetried uint64
}

type metrics struct {
	ok, dup, errs, unknown atomic.Uint64
	batched, batchRetried  atomic.Uint64

	mu      sync.Mutex
	backlog int64
	oldest  time.Time
	leader  atomic.Bool

	publishes *prometheus.CounterVec
	batchedC  *prometheus.CounterVec
	// batchedC's children, counted per event: no label lookup each time.
	batchStored, batchRetry prometheus.Counter
}

func newMetrics(name string, reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{}
	labels := prometheus.Labels{"outbox": name}
	m.publishes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outboxrelay_publishes_total", Help: "Publishes of outbox events by outcome (ok, duplicate, error, unknown).", ConstLabels: labels,
	}, []string{"outcome"})
	for _, o := range []string{OutcomeOK, OutcomeDuplicate, OutcomeError, OutcomeUnknown} {
		m.publishes.WithLabelValues(o)
	}
	m.batchedC = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outboxrelay_fast_batch_publishes_total", Help: "Publishes in fast batches by result: stored (also counted as ok in outboxrelay_publishes_total), retried (not stored by the batch, published again singly).", ConstLabels: labels,
	}, []string{"result"})
	m.batchStored, m.batchRetry = m.batchedC.WithLabelValues("stored"), m.batchedC.WithLabelValues("retried")
	if reg == nil {
		return m, nil
	}
	cs := []prometheus.Collector{
		m.publishes,
		m.batchedC,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "outboxrelay_oldest_unsent_age_seconds", Help: "Age of the oldest unsent outbox event (0 when none).", ConstLabels: labels,
		}, m.oldestAge),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "outboxrelay_backlog_events", Help: "Unsent outbox events.", ConstLabels: labels,
		}, func() float64 { m.mu.Lock(); defer m.mu.Unlock(); return float64(m.backlog) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "outboxrelay_leader", Help: "1 if this relay holds the outbox's lease.", ConstLabels: labels,
		}, func() float64 {
			if m.leader.Load() {
				return 1
			}
			return 0
		}),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) oldestAge() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.oldest.IsZero() {
		return 0
	}
	return time.Since(m.oldest).Seconds()
}

func (m *metrics) setStats(s Stats) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.backlog, m.oldest = s.Unsent, s.OldestUnsent
}

func (m *metrics) count(outcome string) {
	switch outcome {
	case OutcomeOK:
		m.ok.Add(1)
	case OutcomeDuplicate:
		m.dup.Add(1)
	case OutcomeError:
		m.errs.Add(1)
	default:
		m.unknown.Add(1)
	}
	m.publishes.WithLabelValues(outcome).Inc()
}

// countBatch counts a fast-batch publish stored (true) or to retry.
func (m *metrics) countBatch(stored bool) {
	if stored {
		m.batched.Add(1)
		m.batchStored.Inc()
		return
	}
	m.batchRetried.Add(1)
	m.batchRetry.Inc()
}

func (m *metrics) counts() Counts {
	return Counts{OK: m.ok.Load(), Duplicate: m.dup.Load(), Error: m.errs.Load(), Unknown: m.unknown.Load(),
		Batched: m.batched.Load(), BatchRetried: m.batchRetried.Load()}
}
