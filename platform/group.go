package platform

import (
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Group consumer settings. The group runtime (platform/consumer) pulls from
// each partition consumer through its priority group; the pinned client
// is the one member owning the partition, and loses it after PinnedTTL
// without pulling.
const (
	// GroupAckWait is a partition consumer's AckWait: how long an event
	// handed to a member stays its own before it is delivered again.
	GroupAckWait       = 30 * time.Second
	groupMaxAckPending = 1000
	groupPinnedTTL     = 2 * time.Minute
	// groupMaxDeliver is the attempts per event (the runtime's
	// MaxAttempts): after it the broker stops redelivering and emits the
	// MAX_DELIVERIES advisory the dlq.Router turns into a DLQ entry.
	groupMaxDeliver = 5
)

// GroupConsumerConfig is the durable consumer holding group's position on
// partition p of its topic. Replicas 0 makes the server use the stream's
// replica count, now and after the topic's replicas change.
func GroupConsumerConfig(g GroupSpec, p int) jetstream.ConsumerConfig {
	name := PartitionConsumer(g.Name, p)
	return jetstream.ConsumerConfig{
		Name:           name,
		Durable:        name,
		Description:    fmt.Sprintf("platform group %s on topic %s, partition %d", g.Name, g.Topic, p),
		FilterSubject:  PartitionSubject(g.Topic, p),
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        GroupAckWait,
		MaxAckPending:  groupMaxAckPending,
		MaxDeliver:     groupMaxDeliver,
		PriorityPolicy: jetstream.PriorityPolicyPinned,
		PriorityGroups: []string{g.Name},
		PinnedTTL:      groupPinnedTTL,
		Metadata:       groupMetadata(g, p),
	}
}

// groupMetadata is the replicated record of a group on each of its
// partition consumers, the declared tolerance included (the catalog
// metrics read it back, so a group applied through the control API
// exports its own tolerance).
func groupMetadata(g GroupSpec, p int) map[string]string {
	md := map[string]string{
		MetaGroup:     g.Name,
		MetaTopic:     g.Topic,
		MetaPartition: strconv.Itoa(p),
	}
	if g.Tolerance > 0 {
		md[MetaTolerance] = g.Tolerance.String()
	}
	return md
}

// DefaultGroupTolerance is the oldest unprocessed age a group accepts
// when its spec sets no tolerance (the PlatformGroupOldestUnprocessed-
// AboveTolerance alert's default).
const DefaultGroupTolerance = 5 * time.Minute

// EffectiveTolerance is the group's Tolerance, or DefaultGroupTolerance.
func (g GroupSpec) EffectiveTolerance() time.Duration {
	if g.Tolerance > 0 {
		return g.Tolerance
	}
	return DefaultGroupTolerance
}
