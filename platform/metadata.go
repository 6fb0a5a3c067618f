package platform

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The replicated record of a spec is the metadata of its stream (and of its
// consumers): it survives node loss with the stream, and List, Describe and
// the conflict checks of Apply read the spec back from it. Keys read only
// here are unexported.
const (
	mdName      = "platform.name"
	mdCleanup   = "platform.cleanup"
	mdTombstone = "platform.tombstone_retention"
	mdReview    = "platform.review"
	mdCanary    = "platform.canary" // "off" when opted out
	mdValidate  = "platform.validate"
	mdEventType = "platform.event_type"
)

// Metadata keys read outside the package. Every platform key starts with
// MetaPrefix; the Reconciler (platform/catalog) compares and updates only
// those, and keeps any other key (the server's _nats.*) as it is.
const (
	MetaPrefix = "platform."
	// MetaKind is a platform stream's kind (StreamKindTopic, ...); a
	// stream without it is not the platform's.
	MetaKind = "platform.kind"
	// A topic's partition count and key documentation, a topic's or
	// queue's owner, a queue's lease and attempts.
	MetaPartitions  = "platform.partitions"
	MetaKey         = "platform.key"
	MetaOwner       = "platform.owner"
	MetaLease       = "platform.lease"
	MetaMaxAttempts = "platform.max_attempts"
	MetaResidency   = "platform.residency" // region the data must not leave
	// A partition consumer's group, topic, partition and the group's
	// declared tolerance.
	MetaGroup     = "platform.group"
	MetaTopic     = "platform.topic"
	MetaPartition = "platform.partition"
	MetaTolerance = "platform.tolerance"
	// The topic or queue a DLQ stream serves, and a queue consumer's queue.
	MetaDLQOf = "platform.dlq_of"
	MetaQueue = "platform.queue"
)

// Stream kinds: the values of a stream's platform.kind (StreamKind).
const (
	StreamKindTopic     = "topic"
	StreamKindQueue     = "queue"
	StreamKindDLQ       = "dlq"
	StreamKindDLQEvents = "dlq_events"
)

func topicMetadata(t TopicSpec) map[string]string {
	md := map[string]string{
		MetaKind:       StreamKindTopic,
		mdName:         t.Name,
		MetaPartitions: strconv.Itoa(t.Partitions),
	}
	setIf(md, MetaKey, t.Key)
	setIf(md, MetaOwner, t.Owner)
	setIf(md, MetaResidency, t.Residency)
	setIf(md, mdReview, t.Review)
	if t.ValidateEvents {
		md[mdValidate] = "true"
	}
	setIf(md, mdEventType, t.EventType)
	if !t.CanaryEnabled() {
		md[mdCanary] = canaryOff
	}
	if t.Compacted() {
		md[mdCleanup] = CleanupCompact
		md[mdTombstone] = t.EffectiveTombstoneRetention().String()
	}
	return md
}

func queueMetadata(q QueueSpec) map[string]string {
	md := map[string]string{
		MetaKind:        StreamKindQueue,
		mdName:          q.Name,
		MetaLease:       q.Lease.String(),
		MetaMaxAttempts: strconv.Itoa(q.MaxAttempts),
	}
	setIf(md, MetaOwner, q.Owner)
	if !q.CanaryEnabled() {
		md[mdCanary] = canaryOff
	}
	return md
}

func setIf(md map[string]string, k, v string) {
	if v != "" {
		md[k] = v
	}
}

// StreamKind returns the platform kind recorded on a stream ("" for a stream
// the platform does not manage).
func StreamKind(cfg *jetstream.StreamConfig) string {
	return cfg.Metadata[MetaKind]
}

// ObjectName returns the topic or queue name of a platform stream.
func ObjectName(cfg *jetstream.StreamConfig) string {
	if n := cfg.Metadata[mdName]; n != "" {
		return n
	}
	return strings.ReplaceAll(cfg.Name, "_", ".")
}

// TopicFromStream reads a topic spec back from its stream.
func TopicFromStream(cfg *jetstream.StreamConfig) (TopicSpec, error) {
	if k := StreamKind(cfg); k != StreamKindTopic {
		return TopicSpec{}, fmt.Errorf("platform: stream %q is not a topic (kind %q)", cfg.Name, k)
	}
	n, err := strconv.Atoi(cfg.Metadata[MetaPartitions])
	if err != nil || n < 1 {
		return TopicSpec{}, fmt.Errorf("platform: stream %q: metadata %s is %q, not a partition count", cfg.Name, MetaPartitions, cfg.Metadata[MetaPartitions])
	}
	t := TopicSpec{
		Name:           ObjectName(cfg),
		Partitions:     n,
		Replicas:       cfg.Replicas,
		Retention:      Retention{MaxAge: cfg.MaxAge, MaxBytes: max(cfg.MaxBytes, 0)},
		Key:            cfg.Metadata[MetaKey],
		Residency:      cfg.Metadata[MetaResidency],
		Owner:          cfg.Metadata[MetaOwner],
		Review:         cfg.Metadata[mdReview],
		Canary:         canaryFromMetadata(cfg.Metadata),
		ValidateEvents: cfg.Metadata[mdValidate] == "true",
		EventType:      cfg.Metadata[mdEventType],
	}
	if cfg.Metadata[mdCleanup] == CleanupCompact {
		t.Cleanup = CleanupCompact
		if d, err := time.ParseDuration(cfg.Metadata[mdTombstone]); err == nil {
			t.TombstoneRetention = d
		}
	}
	return t, nil
}

// QueueFromStream reads a queue spec back from its stream.
func QueueFromStream(cfg *jetstream.StreamConfig) (QueueSpec, error) {
	if k := StreamKind(cfg); k != StreamKindQueue {
		return QueueSpec{}, fmt.Errorf("platform: stream %q is not a queue (kind %q)", cfg.Name, k)
	}
	lease, err := time.ParseDuration(cfg.Metadata[MetaLease])
	if err != nil {
		return QueueSpec{}, fmt.Errorf("platform: stream %q: metadata %s is %q, not a duration", cfg.Name, MetaLease, cfg.Metadata[MetaLease])
	}
	attempts, err := strconv.Atoi(cfg.Metadata[MetaMaxAttempts])
	if err != nil {
		return QueueSpec{}, fmt.Errorf("platform: stream %q: metadata %s is %q, not a number", cfg.Name, MetaMaxAttempts, cfg.Metadata[MetaMaxAttempts])
	}
	return QueueSpec{
		Name:        ObjectName(cfg),
		Lease:       lease,
		MaxAttempts: attempts,
		Replicas:    cfg.Replicas,
		Owner:       cfg.Metadata[MetaOwner],
		Canary:      canaryFromMetadata(cfg.Metadata),
		Residency:   cfg.Metadata[MetaResidency],
	}, nil
}
