package platform

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// DuplicateWindow is the Nats-Msg-Id dedupe window of topics and queues
// (and of the advisory stream of their DLQ): a publish retried with the
// same event id within it is stored once.
const DuplicateWindow = 2 * time.Minute

// TopicStreamConfig is the stream backing a topic: subjects <name>.*,
// stored as <name>.<partition>.<key> by the subject transform.
func TopicStreamConfig(t TopicSpec) jetstream.StreamConfig {
	maxBytes := t.Retention.MaxBytes
	if maxBytes == 0 {
		maxBytes = -1
	}
	cfg := jetstream.StreamConfig{
		Name:        StreamName(t.Name),
		Description: "platform topic " + t.Name,
		Subjects:    []string{t.Name + ".*"},
		SubjectTransform: &jetstream.SubjectTransformConfig{
			Source:      t.Name + ".*",
			Destination: topicTransformDest(t.Name, t.Partitions),
		},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    t.Replicas,
		MaxAge:      t.Retention.MaxAge,
		MaxBytes:    maxBytes,
		Discard:     jetstream.DiscardOld,
		AllowDirect: true,
		// Fast-ingest batches (the outbox relay publishes a backlog in
		// them: one ack per flow window instead of one per event).
		AllowBatchPublish: true,
		Duplicates:        DuplicateWindow,
		Metadata:          topicMetadata(t),
	}
	if t.Compacted() {
		// Keep the latest event per stored subject <topic>.<p>.<key>;
		// tombstones carry a Nats-TTL header (see compact.go), which the
		// stream honours only with AllowMsgTTL.
		cfg.MaxMsgsPerSubject = 1
		cfg.AllowMsgTTL = true
	}
	return cfg
}

// EffectiveCleanup is the topic's cleanup policy with "" read as
// CleanupDelete.
func (t TopicSpec) EffectiveCleanup() string {
	if t.Cleanup == "" {
		return CleanupDelete
	}
	return t.Cleanup
}
