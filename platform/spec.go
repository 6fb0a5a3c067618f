package platform

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/msgplatform/platform/internal/validate"
)

// Limits on declarative objects.
const (
	MaxPartitions = 1024
	// DefaultReplicas is the replica count of topics and queues unless a
	// spec says otherwise: a quorum of 2 survives the loss of one node.
	DefaultReplicas = 3
)

var (
	// Topic and queue names: dot-separated tokens of lower-case letters,
	// digits and '-', e.g. "orders", "orders.eu", "shipment-jobs".
	objectNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}(\.[a-z0-9][a-z0-9-]{0,62}){0,3}$`)
	// Group names: one token, e.g. "email-notifier".
	groupNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
)

// ValidObjectName reports whether name is a valid topic or queue name.
func ValidObjectName(name string) bool { return objectNameRE.MatchString(name) }

// ValidGroupName reports whether name is a valid group name.
func ValidGroupName(name string) bool { return groupNameRE.MatchString(name) }

// Retention bounds how long a topic keeps events. Zero means no bound on
// that axis; at least one of them must be set.
type Retention struct {
	MaxAge   time.Duration `mapstructure:"max_age" json:"max_age,omitempty"`
	MaxBytes int64         `mapstructure:"max_bytes" json:"max_bytes,omitempty"`
}

// TopicSpec declares a topic: a partitioned, retained log addressable as
// <name>.<key>. Events with the same key always land on the same
// partition.
type TopicSpec struct {
	Name       string    `mapstructure:"name" json:"name"`
	Partitions int       `mapstructure:"partitions" json:"partitions"`
	Replicas   int       `mapstructure:"replicas" json:"replicas"`
	Retention  Retention `mapstructure:"retention" json:"retention"`
	// Key documents what the partition key is, e.g. "order:<orderId>".
	Key string `mapstructure:"key" json:"key,omitempty"`
	// Residency is the region the topic's data must never leave ("" for
	// none).
	Residency string `mapstructure:"residency" json:"residency,omitempty"`
	// Owner is the team answerable for the topic and its DLQ.
	Owner string `mapstructure:"owner" json:"owner,omitempty"`
	// Cleanup is what the topic keeps: CleanupDelete ("delete", the
	// default, "" means it) keeps every event until retention removes
	// it; CleanupCompact ("compact") keeps only the latest event per key
	// (see compact.go): a current-state topic, not a full history.
	Cleanup string `mapstructure:"cleanup" json:"cleanup,omitempty"`
	// TombstoneRetention is how long a compacted topic keeps a tombstone
	// (an event with header Event-Tombstone: true) before the key is
	// gone altogether. Compacted topics only; 0 means
	// DefaultTombstoneRetention.
	TombstoneRetention time.Duration `mapstructure:"tombstone_retention" json:"tombstone_retention,omitempty"`
	// Review is ReviewRequired ("required") when moving a group's position
	// on the topic (group reset, replay) must be approved by a second
	// person, e.g. payment topics; "" otherwise.
	Review string `mapstructure:"review" json:"review,omitempty"`
	// Canary is false to opt the topic out of platformd's canary events
	// (see platform/canary); nil or true means on.
	Canary *bool `mapstructure:"canary" json:"canary,omitempty"`
	// DLQ sets the retention and owner of the topic's dead-letter queue.
	DLQ DLQSpec `mapstructure:"dlq" json:"dlq,omitzero"`
	// ValidateEvents (validate: true) makes publishers check each event
	// against the registered schema of its event type before publishing
	// (schema.NewTopicValidator); false publishes unchecked.
	ValidateEvents bool `mapstructure:"validate" json:"validate,omitempty"`
	// EventType is the schema registry subject a validating topic's
	// events conform to, unless an event names its own (header
	// Event-Type). Only with validate: true.
	EventType string `mapstructure:"event_type" json:"event_type,omitempty"`
}

// Topic cleanup policies and review values.
const (
	CleanupDelete  = "delete"
	CleanupCompact = "compact"
	ReviewRequired = "required"
	// DefaultTombstoneRetention is how long a compacted topic keeps a
	// tombstone unless its spec says otherwise.
	DefaultTombstoneRetention = 24 * time.Hour
)

// CanaryEnabled reports whether platformd publishes canaries into the
// topic (the default).
func (t TopicSpec) CanaryEnabled() bool { return t.Canary == nil || *t.Canary }

// CanaryEnabled reports whether platformd publishes canaries into the
// queue (the default).
func (q QueueSpec) CanaryEnabled() bool { return q.Canary == nil || *q.Canary }

// Compacted reports whether the topic keeps only the latest event per key.
func (t TopicSpec) Compacted() bool { return t.Cleanup == CleanupCompact }

// QueueSpec declares a work queue: competing workers claim jobs under a
// lease; a job not acknowledged within the lease comes back.
type QueueSpec struct {
	Name        string        `mapstructure:"name" json:"name"`
	Lease       time.Duration `mapstructure:"lease" json:"lease"`
	MaxAttempts int           `mapstructure:"max_attempts" json:"max_attempts"`
	Replicas    int           `mapstructure:"replicas" json:"replicas"`
	Owner       string        `mapstructure:"owner" json:"owner,omitempty"`
	// Residency is the region the queue's jobs (and its dead letters)
	// must never leave ("" for none), as for a topic.
	Residency string `mapstructure:"residency" json:"residency,omitempty"`
	// Canary is false to opt the queue out of platformd's canary jobs;
	// nil or true means on.
	Canary *bool `mapstructure:"canary" json:"canary,omitempty"`
	// DLQ sets the retention and owner of the queue's dead-letter queue.
	DLQ DLQSpec `mapstructure:"dlq" json:"dlq,omitzero"`
}

// GroupSpec declares a consumer group: a named durable subscription to a
// topic with its own position on every partition.
type GroupSpec struct {
	Name  string `mapstructure:"name" json:"name"`
	Topic string `mapstructure:"topic" json:"topic"`
	// Tolerance is the oldest unprocessed age the group accepts before
	// it is alerted on (platform_group_tolerance_seconds); 0 means
	// DefaultGroupTolerance.
	Tolerance time.Duration `mapstructure:"tolerance" json:"tolerance,omitempty"`
}

// DefaultTopicSpec returns a topic with the product defaults: 1 partition,
// replicas 3, 3 days retention.
func DefaultTopicSpec(name string) TopicSpec {
	return TopicSpec{Name: name, Partitions: 1, Replicas: DefaultReplicas, Retention: Retention{MaxAge: 72 * time.Hour}}
}

// DefaultQueueSpec returns a queue with the product defaults: lease 60s,
// 5 attempts, replicas 3.
func DefaultQueueSpec(name string) QueueSpec {
	return QueueSpec{Name: name, Lease: 60 * time.Second, MaxAttempts: 5, Replicas: DefaultReplicas}
}

// Validate reports every problem with the topic spec.
func (t TopicSpec) Validate() error { return specProblems(t, t.Name, t.Name).Err(ErrInvalidSpec) }

func (t TopicSpec) validateInto(p *validate.Problems) {
	if !objectNameRE.MatchString(t.Name) {
		p.Addf("name", "must be dot-separated tokens of a-z, 0-9 and '-' (e.g. orders or orders.eu), got %q", t.Name)
	}
	if t.Partitions < 1 || t.Partitions > MaxPartitions {
		p.Addf("partitions", "must be 1..%d, got %d", MaxPartitions, t.Partitions)
	}
	validateReplicas(p, t.Replicas)
	if t.Retention.MaxAge < 0 {
		p.Addf("retention.max_age", "must be >= 0, got %s", t.Retention.MaxAge)
	}
	if t.Retention.MaxBytes < 0 {
		p.Addf("retention.max_bytes", "must be >= 0, got %d", t.Retention.MaxBytes)
	}
	switch t.Cleanup {
	case "", CleanupDelete, CleanupCompact:
	default:
		p.Addf("cleanup", "must be %q (keep every event until retention removes it) or %q (keep the latest event per key), got %q", CleanupDelete, CleanupCompact, t.Cleanup)
	}
	// A compacted topic is bounded by its number of keys; a delete topic
	// only by its retention.
	if t.Retention.MaxAge == 0 && t.Retention.MaxBytes == 0 && !t.Compacted() {
		p.Addf("retention", "set max_age and/or max_bytes: a topic is a retained log, not an unbounded one (or declare cleanup: compact to keep the latest event per key)")
	}
	if t.TombstoneRetention < 0 || (t.TombstoneRetention > 0 && t.TombstoneRetention < time.Second) {
		p.Addf("tombstone_retention", "must be 0 (default %s) or at least 1s, got %s", DefaultTombstoneRetention, t.TombstoneRetention)
	}
	if t.TombstoneRetention > 0 && !t.Compacted() {
		p.Addf("tombstone_retention", "applies to compacted topics only (cleanup: compact)")
	}
	if t.Review != "" && t.Review != ReviewRequired {
		p.Addf("review", "must be %q or empty, got %q", ReviewRequired, t.Review)
	}
	if t.EventType != "" && !t.ValidateEvents {
		p.Addf("event_type", "applies only to a validating topic (validate: true), got %q", t.EventType)
	}
	validateResidency(p, t.Residency)
	t.DLQ.validateInto(p, t.Retention.MaxAge)
}

// Validate reports every problem with the queue spec.
func (q QueueSpec) Validate() error { return specProblems(q, q.Name, q.Name).Err(ErrInvalidSpec) }

func (q QueueSpec) validateInto(p *validate.Problems) {
	if !objectNameRE.MatchString(q.Name) {
		p.Addf("name", "must be dot-separated tokens of a-z, 0-9 and '-' (e.g. shipment-jobs), got %q", q.Name)
	}
	if q.Lease < time.Second || q.Lease > 12*time.Hour {
		p.Addf("lease", "must be 1s..12h, got %s", q.Lease)
	}
	if q.MaxAttempts < 1 || q.MaxAttempts > 1000 {
		p.Addf("max_attempts", "must be 1..1000, got %d", q.MaxAttempts)
	}
	validateReplicas(p, q.Replicas)
	validateResidency(p, q.Residency)
	q.DLQ.validateInto(p, 0)
}

// Validate reports every problem with the group spec.
func (g GroupSpec) Validate() error { return specProblems(g, g.Name, g.Name).Err(ErrInvalidSpec) }

func (g GroupSpec) validateInto(p *validate.Problems) {
	if !groupNameRE.MatchString(g.Name) {
		p.Addf("name", "must be a-z, 0-9 and '-' (e.g. email-notifier), got %q", g.Name)
	}
	if !objectNameRE.MatchString(g.Topic) {
		p.Addf("topic", "must name a topic, got %q", g.Topic)
	}
	if g.Tolerance < 0 {
		p.Addf("tolerance", "must be >= 0 (0: %s), got %s", DefaultGroupTolerance, g.Tolerance)
	}
}

func validateReplicas(p *validate.Problems, r int) {
	if r < 1 || r > 5 {
		p.Addf("replicas", "must be 1..5, got %d", r)
	}
}

// validateResidency records a residency that is neither "" nor a region
// name.
func validateResidency(p *validate.Problems, region string) {
	if region != "" && !groupNameRE.MatchString(region) {
		p.Addf("residency", "must be a region name such as eu, got %q", region)
	}
}

// specProblems returns every problem of spec s, named name and declared
// under key, a name that is not its key included.
func specProblems(s interface{ validateInto(*validate.Problems) }, name, key string) *validate.Problems {
	var p validate.Problems
	s.validateInto(&p)
	if name != key {
		p.Addf("name", "must equal its key %q, got %q", key, name)
	}
	return &p
}

// Catalog is the declared set of topics, queues and groups, keyed by name.
type Catalog struct {
	Topics map[string]TopicSpec `mapstructure:"topics" json:"topics"`
	Queues map[string]QueueSpec `mapstructure:"queues" json:"queues"`
	Groups map[string]GroupSpec `mapstructure:"groups" json:"groups"`
}

// Validate reports every problem in the catalog, keyed as in the
// configuration file (e.g. "topics.orders.partitions"), including cross
// references: a group's topic must be declared, and topic and queue names
// must not collide.
func (c Catalog) Validate() error {
	var p validate.Problems
	for key, t := range c.Topics {
		p.Merge("topics."+key, specProblems(t, t.Name, key).Err(nil))
	}
	for key, q := range c.Queues {
		qp := specProblems(q, q.Name, key)
		if _, dup := c.Topics[key]; dup {
			qp.Addf("name", "%q is already a topic; topics and queues share one namespace", key)
		}
		// A queue takes every subject under <name>.>, so no other topic
		// or queue may be named <name>.<more>.
		for _, other := range slices.Sorted(maps.Keys(c.Topics)) {
			if strings.HasPrefix(other, key+".") {
				qp.Addf("name", "its subjects %s.> would also take those of topic %q; rename one of them", key, other)
			}
		}
		for _, other := range slices.Sorted(maps.Keys(c.Queues)) {
			if strings.HasPrefix(other, key+".") {
				qp.Addf("name", "its subjects %s.> would also take those of queue %q; rename one of them", key, other)
			}
		}
		p.Merge("queues."+key, qp.Err(nil))
	}
	for key, g := range c.Groups {
		gp := specProblems(g, g.Name, key)
		if _, ok := c.Topics[g.Topic]; !ok && g.Topic != "" {
			gp.Addf("topic", "no topic %q is declared", g.Topic)
		}
		p.Merge("groups."+key, gp.Err(nil))
	}
	return p.Err(ErrInvalidSpec)
}

// StreamName is the JetStream stream backing a topic or queue: the name
// with '.' replaced by '_' (names never contain '_', so this is 1:1).
func StreamName(name string) string {
	b := []byte(name)
	for i, c := range b {
		if c == '.' {
			b[i] = '_'
		}
	}
	return string(b)
}

// PartitionConsumer is the durable consumer holding group's position on
// one partition.
func PartitionConsumer(group string, partition int) string {
	return fmt.Sprintf("%s-p%d", group, partition)
}
