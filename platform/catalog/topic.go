package catalog

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/platform"
)

// diffCompaction returns the differences of the stream fields compaction
// manages, and allow_batched (diffStream does not compare them).
func diffCompaction(cur *jetstream.StreamConfig, want jetstream.StreamConfig) []string {
	var d diffs
	d.cmp("stream.max_msgs_per_subject", normLimit(cur.MaxMsgsPerSubject), normLimit(want.MaxMsgsPerSubject))
	if want.AllowMsgTTL {
		d.cmp("stream.allow_msg_ttl", cur.AllowMsgTTL, want.AllowMsgTTL)
	}
	if want.AllowBatchPublish {
		d.cmp("stream.allow_batched", cur.AllowBatchPublish, want.AllowBatchPublish)
	}
	return d
}

// mergeTopicStream is mergeStream plus the compaction fields. AllowMsgTTL
// is never turned off (the server refuses that), so a topic switched
// back from compact to delete keeps it.
func mergeTopicStream(cur *jetstream.StreamConfig, want jetstream.StreamConfig) jetstream.StreamConfig {
	n := mergeStream(cur, want)
	n.MaxMsgsPerSubject = want.MaxMsgsPerSubject
	if n.MaxMsgsPerSubject == 0 {
		n.MaxMsgsPerSubject = -1
	}
	n.AllowMsgTTL = cur.AllowMsgTTL || want.AllowMsgTTL
	n.AllowBatchPublish = cur.AllowBatchPublish || want.AllowBatchPublish
	return n
}

func (p *plan) planTopic(ctx context.Context, t platform.TopicSpec) {
	key := "topics." + t.Name
	want := platform.TopicStreamConfig(t)
	info, err := p.stream(ctx, want.Name)
	if err != nil {
		p.failRead(err)
		return
	}
	it := &planItem{change: Change{Kind: KindTopic, Name: t.Name}}
	if info == nil {
		p.checkSubjects(ctx, key, want)
		it.change.Action = ActionCreate
		it.change.Details = topicCreateDetails(t)
		it.steps = append(it.steps, p.r.createStream(want))
		p.planDLQ(ctx, it, t.Name, t.DLQSettings(), t.Replicas)
		p.add(it)
		return
	}
	cur, ok := existingSpec(p, key, platform.StreamKindTopic, info, platform.TopicFromStream)
	if !ok {
		return
	}
	if cur.Partitions != t.Partitions {
		p.conflict(key+".partitions", "changing %d -> %d would move keys to other partitions and break per-key order; create a new topic (e.g. %s-v2) with %d partitions and migrate consumers, or drain the backlog first",
			cur.Partitions, t.Partitions, t.Name, t.Partitions)
	}
	p.checkReplicas(key, "topic", cur.Replicas, t.Replicas)
	if from, to := cur.EffectiveCleanup(), t.EffectiveCleanup(); from != to && !p.o.AllowCleanupChange {
		p.conflict(key+".cleanup", "changing %s -> %s changes what history the topic keeps (compact keeps only the latest event per key and deletes older events at once; delete keeps every event until retention); if that is intended, apply with --allow-cleanup-change (allow_cleanup_change: true)", from, to)
	}
	p.checkStorage(key, "topic", &info.Config, want)
	if d := append(diffStream(&info.Config, want), diffCompaction(&info.Config, want)...); len(d) > 0 {
		it.change.Action = ActionUpdate
		it.change.Details = d
		it.steps = append(it.steps, p.r.updateStream(mergeTopicStream(&info.Config, want)))
	}
	p.planDLQ(ctx, it, t.Name, t.DLQSettings(), t.Replicas)
	p.add(it)
}

func topicCreateDetails(t platform.TopicSpec) []string {
	d := []string{
		fmt.Sprintf("partitions: %d (publish to %s.<key>, stored as %s.<partition>.<key>)", t.Partitions, t.Name, t.Name),
		fmt.Sprintf("replicas: %d", t.Replicas),
	}
	if t.Retention.MaxAge > 0 {
		d = append(d, "retention.max_age: "+t.Retention.MaxAge.String())
	}
	if t.Retention.MaxBytes > 0 {
		d = append(d, fmt.Sprintf("retention.max_bytes: %d", t.Retention.MaxBytes))
	}
	if t.Compacted() {
		d = append(d, fmt.Sprintf("cleanup: compact (latest event per key; tombstones kept %s; not a full history)", t.EffectiveTombstoneRetention()))
	}
	for _, kv := range [][2]string{{"key", t.Key}, {"owner", t.Owner}, {"residency", t.Residency}, {"review", t.Review}} {
		if kv[1] != "" {
			d = append(d, kv[0]+": "+kv[1])
		}
	}
	return d
}
