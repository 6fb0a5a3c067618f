package outboxrelay

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgplatform/platform/internal/validate"
)

// Config configures a Relay.
type Config struct {
	// Name identifies the outbox: the lease key (one active relay per
	// name) and the "outbox" label of the metrics. Required.
	Name string
	// Holder identifies this relay process in the lease (default
	// hostname-pid-random).
	Holder string
	// TopicMap maps an event's Topic to the platform topic it is published
	// to; topics not in the map are used as they are.
	TopicMap map[string]string

	// BatchSize is how many unsent records one read returns at most
	// (default 1000). A read also returns no more than the pipeline
	// already holds, and at least MaxInFlight, so a backlog's reads grow
	// from one publish window to BatchSize and each returns before the
	// records already read are published. The next read starts while fewer
	// than 2*BatchSize records are being published or marked.
	BatchSize int
	// MaxInFlight bounds async publishes awaiting an ack (default 1024).
	MaxInFlight int
	// SinglePublishes turns fast batches off: every event is published
	// on its own (one ack each). By default a backlog goes in fast
	// batches (fastbatch.go), to topics whose stream allows them.
	SinglePublishes bool
	// AckTimeout bounds the wait for one publish's ack (default 5s); a
	// publish not acked in time counts as "unknown" and is retried.
	AckTimeout time.Duration
	// PollInterval is the pause when the outbox is empty (default 20ms),
	// stretched by one PollInterval per MaxInFlight records still in the
	// pipeline (up to 250ms), since a read's cost grows with them.
	PollInterval time.Duration
	// BackoffMin and BackoffMax bound the exponential backoff, with full
	// jitter, after a failed read, mark or fence, and per key after a
	// failed publish (defaults 100ms, 5s).
	BackoffMin, BackoffMax time.Duration

	// LeaseBucket is the JetStream KV bucket holding the leases (default
	// "outboxrelay-leases"); it is created if missing.
	LeaseBucket string
	// LeaseReplicas is the bucket's replica count when created (default 3).
	LeaseReplicas int
	// LeaseTTL: a standby takes over when the lease's revision has not
	// changed for this long (default 4s); the holder renews every TTL/4 and
	// stops publishing when it could not renew for TTL/2.
	LeaseTTL time.Duration

	// Retention is how long sent records are kept (default 24h).
	Retention time.Duration
	// PruneInterval and PruneBatch: pruning runs every PruneInterval in
	// batches of PruneBatch rows (defaults 1m, 500).
	PruneInterval time.Duration
	PruneBatch    int
	// StatsInterval is how often the backlog gauges are refreshed (default
	// 5s).
	StatsInterval time.Duration

	// Registerer, if set, receives the relay's metrics.
	Registerer prometheus.Registerer
	// Logger (default slog.Default()).
	Logger *slog.Logger
	// OnAck, if set, is called for every record whose publish was acked,
	// before it is marked sent, on the relay's scheduling goroutine (it
	// must return quickly).
	OnAck func(rec Record, ack Ack)
	// Faults injects failures (tests).
	Faults Faults
}

// Faults are hooks that inject failures at the relay's critical steps.
type Faults struct {
	// AfterPublish runs with each batch of acked records before it is
	// marked sent. A non-nil error kills the relay right there,
	// as a crash would: nothing is marked, the lease is not released (it
	// expires), and Run returns an error wrapping ErrInjectedFault.
	AfterPublish func(acked []Record) error
}

// DefaultConfig returns the defaults for the outbox name.
func DefaultConfig(name string) Config {
	host, _ := os.Hostname()
	return Config{
		Name:          name,
		Holder:        fmt.Sprintf("%s-%d-%s", host, os.Getpid(), randomID()),
		BatchSize:     1000,
		MaxInFlight:   1024,
		AckTimeout:    5 * time.Second,
		PollInterval:  20 * time.Millisecond,
		BackoffMin:    100 * time.Millisecond,
		BackoffMax:    5 * time.Second,
		LeaseBucket:   "outboxrelay-leases",
		LeaseReplicas: 3,
		LeaseTTL:      4 * time.Second,
		Retention:     24 * time.Hour,
		PruneInterval: time.Minute,
		PruneBatch:    500,
		StatsInterval: 5 * time.Second,
	}
}

var (
	nameRE   = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	bucketRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
)

// Validate reports every problem at once, as a *validate.Error wrapping
// ErrInvalidConfig.
func (c Config) Validate() error {
	var p validate.Problems
	if !nameRE.MatchString(c.Name) {
		p.Addf("name", "must be 1-64 letters, digits, '-' or '_' (it is a KV key), got %q", c.Name)
	}
	if c.Holder == "" {
		p.Addf("holder", "must be set (DefaultConfig sets one)")
	}
	for from, to := range c.TopicMap {
		if from == "" || to == "" {
			p.Addf("topic_map", "empty topic in mapping %q -> %q", from, to)
		}
	}
	if c.BatchSize < 1 || c.BatchSize > 100000 {
		p.Addf("batch_size", "must be 1..100000, got %d", c.BatchSize)
	}
	if c.MaxInFlight < 1 || c.MaxInFlight > 65536 {
		p.Addf("max_in_flight", "must be 1..65536, got %d", c.MaxInFlight)
	}
	if c.AckTimeout < time.Second {
		p.Addf("ack_timeout", "must be >= 1s (a shorter one turns slow acks into needless retries), got %s", c.AckTimeout)
	}
	if c.PollInterval <= 0 {
		p.Addf("poll_interval", "must be > 0, got %s", c.PollInterval)
	}
	if c.BackoffMin <= 0 || c.BackoffMax < c.BackoffMin {
		p.Addf("backoff", "want 0 < backoff_min <= backoff_max, got %s and %s", c.BackoffMin, c.BackoffMax)
	}
	if !bucketRE.MatchString(c.LeaseBucket) {
		p.Addf("lease_bucket", "must be a KV bucket name (letters, digits, '-', '_'), got %q", c.LeaseBucket)
	}
	if c.LeaseReplicas < 1 || c.LeaseReplicas > 5 {
		p.Addf("lease_replicas", "must be 1..5, got %d", c.LeaseReplicas)
	}
	if c.LeaseTTL < time.Second || c.LeaseTTL > 5*time.Minute {
		p.Addf("lease_ttl", "must be 1s..5m, got %s", c.LeaseTTL)
	}
	if c.Retention < 0 {
		p.Addf("retention", "must be >= 0, got %s", c.Retention)
	}
	if c.PruneInterval <= 0 {
		p.Addf("prune_interval", "must be > 0, got %s", c.PruneInterval)
	}
	if c.PruneBatch < 1 || c.PruneBatch > 10000 {
		p.Addf("prune_batch", "must be 1..10000 (small batches keep locks short), got %d", c.PruneBatch)
	}
	if c.StatsInterval <= 0 {
		p.Addf("stats_interval", "must be > 0, got %s", c.StatsInterval)
	}
	return p.Err(ErrInvalidConfig)
}

func (c Config) topicFor(topic string) string {
	if t, ok := c.TopicMap[topic]; ok {
		return t
	}
	return topic
}

func randomID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ParseTopicMap parses a TopicMap written "from=to,from2=to2" (nil for
// ""); a pair that is not from=to with both names is an error.
func ParseTopicMap(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	m := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		from, to, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || from == "" || to == "" {
			return nil, fmt.Errorf("want from=to pairs separated by commas, got %q", pair)
		}
		m[from] = to
	}
	return m, nil
}
