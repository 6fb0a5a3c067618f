package platform

import (
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The replicated record of a spec is the metadata of its stream (and of its
// consumers): it survives node loss with the stream, and List, Describe and
// the conflict checks of Apply read the spec back from it.
const (
	mdPrefix      = "platform."
	mdKind        = "platform.kind"
	mdName        = "platform.name"
	mdPartitions  = "platform.partitions"
	mdKey         = "platform.key"
	mdOwner       = "platform.owner"
	mdLease       = "platform.lease"
	mdMaxAttempts = "platform.max_attempts"
	mdTopic       = "platform.topic"
	mdCleanup     = "platform.cleanup"
	mdTombstone   = "platform.tombstone_retention"
	mdReview      = "platform.review"
	mdCanary      = "platform.canary" // "off" when opted out
	mdValidate    = "platform.validate"
	mdEventType   = "platform.event_type"
	mdTolerance   = "platform.tolerance"
)

// Metadata keys read outside the package: where a stream records its
// residency, a partition consumer its group and partition, a DLQ stream
// the topic or queue it serves, and a queue's consumer its queue.
const (
	MetaResidency = "platform.residency" // region the data must not leave
	MetaGroup     = "platform.group"
	MetaPartition = "platform.partition"
	MetaDLQOf     = "platform.dlq_of"
	MetaQueue     = "platform.queue"
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
		mdKind:       StreamKindTopic,
		mdName:       t.Name,
		mdPartitions: strconv.Itoa(t.Partitions),
	}
	setIf(md, mdKey, t.Key)
	setIf(md, mdOwner, t.Owner)
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
		md[mdTombstone] = t.tombstoneRetention().String()
	}
	return md
}

func queueMetadata(q QueueSpec) map[string]string {
	md := map[string]string{
		mdKind:        StreamKindQueue,
		mdName:        q.Name,
		mdLease:       q.Lease.String(),
		mdMaxAttempts: strconv.Itoa(q.MaxAttempts),
	}
	setIf(md, mdOwner, q.Owner)
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

// platformMetadata returns the platform.* subset of md (never nil).
func platformMetadata(md map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range md {
		if strings.HasPrefix(k, mdPrefix) {
			out[k] = v
		}
	}
	return out
}

// mergeMetadata keeps the keys of cur that are not the platform's (e.g. the
// server's _nats.* keys) and sets the platform's from want.
func mergeMetadata(cur, want map[string]string) map[string]string {
	out := make(map[string]string, len(cur)+len(want))
	for k, v := range cur {
		if !strings.HasPrefix(k, mdPrefix) {
			out[k] = v
		}
	}
	maps.Copy(out, want)
	return out
}

// StreamKind returns the platform kind recorded on a stream ("" for a stream
// the platform does not manage).
func StreamKind(cfg *jetstream.StreamConfig) string {
	return cfg.Metadata[mdKind]
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
	n, err := strconv.Atoi(cfg.Metadata[mdPartitions])
	if err != nil || n < 1 {
		return TopicSpec{}, fmt.Errorf("platform: stream %q: metadata %s is %q, not a partition count", cfg.Name, mdPartitions, cfg.Metadata[mdPartitions])
	}
	t := TopicSpec{
		Name:           ObjectName(cfg),
		Partitions:     n,
		Replicas:       cfg.Replicas,
		Retention:      Retention{MaxAge: cfg.MaxAge, MaxBytes: max(cfg.MaxBytes, 0)},
		Key:            cfg.Metadata[mdKey],
		Residency:      cfg.Metadata[MetaResidency],
		Owner:          cfg.Metadata[mdOwner],
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

// queueFromStream reads a queue spec back from its stream.
func queueFromStream(cfg *jetstream.StreamConfig) (QueueSpec, error) {
	if k := StreamKind(cfg); k != StreamKindQueue {
		return QueueSpec{}, fmt.Errorf("platform: stream %q is not a queue (kind %q)", cfg.Name, k)
	}
	lease, err := time.ParseDuration(cfg.Metadata[mdLease])
	if err != nil {
		return QueueSpec{}, fmt.Errorf("platform: stream %q: metadata %s is %q, not a duration", cfg.Name, mdLease, cfg.Metadata[mdLease])
	}
	attempts, err := strconv.Atoi(cfg.Metadata[mdMaxAttempts])
	if err != nil {
		return QueueSpec{}, fmt.Errorf("platform: stream %q: metadata %s is %q, not a number", cfg.Name, mdMaxAttempts, cfg.Metadata[mdMaxAttempts])
	}
	return QueueSpec{
		Name:        ObjectName(cfg),
		Lease:       lease,
		MaxAttempts: attempts,
		Replicas:    cfg.Replicas,
		Owner:       cfg.Metadata[mdOwner],
		Canary:      canaryFromMetadata(cfg.Metadata),
		Residency:   cfg.Metadata[MetaResidency],
	}, nil
}
