package platform

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/msgplatform/platform/internal/validate"
)

// Canaries: whether a group is processing accepted work is measured, not
// inferred from its offset lag.
//
// Guarantee: platform_canary_age_seconds{topic,group} is, within one check
// period, how long ago the newest canary was published that the group has
// processed on every partition: its partition consumer's ack floor reached
// the canary's stream sequence. A group stuck on one event keeps a small
// lag but its ack floor stops, so its age grows past the tolerance; so
// does a group with no member running or one that cannot fetch. In a queue
// a canary counts once a worker claimed and acked it.
//
// Every CanaryConfig.Interval the Canary publishes one event per partition
// of every topic (and one job per queue) that does not opt out, with
// header Platform-Canary: true and a Nats-Msg-Id naming the slot, so
// several platformd processes store one canary per slot. The runtime acks
// canaries without calling the handler.
//
// Invariants and limits: canaries are ordinary stored events (they count
// in sizes, pending and reset estimates; a compacted topic keeps the
// latest as key CanaryKey). A consumer not built on this runtime must ack
// messages whose IsCanary is true without processing them. Tenant
// canaries (NewTenantCanary) bypass the tenant's ingest and quota.
// Details: docs/design/canaries.md.

// CanaryHeader marks a canary event or job.
const CanaryHeader = "Platform-Canary"

// canaryKeyPrefix starts every canary key: "_canary-<n>". The leading
// '_' keeps it apart from business keys (on a compacted topic a shared
// key would overwrite the business value).
const canaryKeyPrefix = "_canary-"

// canaryQueueToken is the last subject token of a queue's canary jobs.
const canaryQueueToken = "_canary"

// IsCanary reports whether headers mark a canary.
func IsCanary(h nats.Header) bool {
	return h != nil && h.Get(CanaryHeader) == "true"
}

var canaryKeyCache sync.Map // partitions -> []string

// CanaryKeys returns, for a topic with that many partitions, the key of
// each partition's canary: keys[p] is the first of _canary-0, _canary-1,
// ... that PartitionOf maps to p. Deterministic, so every platformd picks
// the same keys.
func CanaryKeys(partitions int) []string {
	if partitions < 1 {
		partitions = 1
	}
	if v, ok := canaryKeyCache.Load(partitions); ok {
		return v.([]string)
	}
	keys := make([]string, partitions)
	left := partitions
	for n := 0; left > 0; n++ {
		k := canaryKeyPrefix + strconv.Itoa(n)
		if p := PartitionOf(k, partitions); keys[p] == "" {
			keys[p] = k
			left--
		}
	}
	v, _ := canaryKeyCache.LoadOrStore(partitions, keys)
	return v.([]string)
}

// CanaryKey returns the key of partition p's canary (see CanaryKeys).
func CanaryKey(partitions, p int) string { return CanaryKeys(partitions)[p] }

// canaryTopicID is the Nats-Msg-Id of a topic canary for one slot.
func canaryTopicID(topic string, p int, slot time.Time) string {
	return fmt.Sprintf("canary:%s:%d:%d", topic, p, slot.UnixNano())
}

// canaryQueueID is the Nats-Msg-Id of a queue canary for one slot.
func canaryQueueID(queue string, slot time.Time) string {
	return fmt.Sprintf("canary:%s:%d", queue, slot.UnixNano())
}

// canarySlotOf reads the slot time back from a canary's Nats-Msg-Id (its
// last ':'-separated field).
func canarySlotOf(id string) (time.Time, bool) {
	if !strings.HasPrefix(id, "canary:") {
		return time.Time{}, false
	}
	ns, err := strconv.ParseInt(id[strings.LastIndexByte(id, ':')+1:], 10, 64)
	if err != nil || ns <= 0 {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}

// canaryOff is the metadata value (platform.canary) of an opted-out topic
// or queue.
const canaryOff = "off"

func canaryFromMetadata(md map[string]string) *bool {
	if md[mdCanary] != canaryOff {
		return nil
	}
	off := false
	return &off
}

// CanaryConfig configures platformd's canary (the `canary:` section of
// its configuration).
type CanaryConfig struct {
	// Interval is how often canaries are published (default 1m); 0 turns
	// the canary off.
	Interval time.Duration `mapstructure:"interval"`
	// Tolerance is the canary age past which a group is not processing
	// accepted work (exported as platform_canary_tolerance_seconds for the
	// PlatformCanaryMissing alert); 0 means 3 intervals.
	Tolerance time.Duration `mapstructure:"tolerance"`
}

// DefaultCanaryConfig returns the default: a canary every minute,
// tolerance 3 minutes.
func DefaultCanaryConfig() CanaryConfig { return CanaryConfig{Interval: time.Minute} }

// MinCanaryInterval is the shortest canary interval accepted.
const MinCanaryInterval = 10 * time.Millisecond

// Enabled reports whether canaries are published.
func (c CanaryConfig) Enabled() bool { return c.Interval > 0 }

// EffectiveTolerance is Tolerance, or 3 intervals when it is 0.
func (c CanaryConfig) EffectiveTolerance() time.Duration {
	if c.Tolerance > 0 {
		return c.Tolerance
	}
	return 3 * c.Interval
}

// Validate reports every problem with the canary configuration.
func (c CanaryConfig) Validate() error {
	var p validate.Problems
	if c.Interval < 0 || (c.Interval > 0 && c.Interval < MinCanaryInterval) {
		p.Addf("interval", "must be 0 (off) or at least %s, got %s", MinCanaryInterval, c.Interval)
	}
	if c.Tolerance < 0 {
		p.Addf("tolerance", "must be >= 0 (0: 3 intervals), got %s", c.Tolerance)
	}
	if c.Tolerance > 0 && c.Interval > 0 && c.Tolerance <= c.Interval {
		p.Addf("tolerance", "must be longer than the interval (%s), or a healthy group's canary is reported missing between two canaries; got %s", c.Interval, c.Tolerance)
	}
	return p.Err(ErrInvalidSpec)
}
