package platform

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// duplicateWindow is the Nats-Msg-Id dedupe window of topics and queues.
const duplicateWindow = 2 * time.Minute

// topicStreamConfig is the stream backing a topic: subjects <name>.*,
// stored as <name>.<partition>.<key> by the subject transform.
func topicStreamConfig(t TopicSpec) jetstream.StreamConfig {
	maxBytes := t.Retention.MaxBytes
	if maxBytes == 0 {
		maxBytes = -1
	}
	return jetstream.StreamConfig{
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
		Duplicates:  duplicateWindow,
		Metadata:    topicMetadata(t),
	}
}

func (p *plan) planTopic(ctx context.Context, t TopicSpec) {
	key := "topics." + t.Name
	want := topicStreamConfig(t)
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
		p.planDLQ(ctx, it, t.Name, t.Owner, t.Replicas)
		p.add(it)
		return
	}
	if !p.checkStreamName(key, info, kindTopic) {
		return
	}
	cur, err := topicFromStream(&info.Config)
	if err != nil {
		p.conflict(key, "%v; the topic's record is damaged, inspect the stream before applying", err)
		return
	}
	if cur.Partitions != t.Partitions {
		p.conflict(key+".partitions", "changing %d -> %d would move keys to other partitions and break per-key order; create a new topic (e.g. %s-v2) with %d partitions and migrate consumers, or drain the backlog first",
			cur.Partitions, t.Partitions, t.Name, t.Partitions)
	}
	p.checkReplicas(key, "topic", cur.Replicas, t.Replicas)
	if info.Config.Storage != want.Storage || info.Config.Retention != want.Retention {
		p.conflict(key, "stream %q has %s storage and %s retention, which cannot be changed in place (want %s, %s); recreate the topic",
			want.Name, info.Config.Storage, info.Config.Retention, want.Storage, want.Retention)
	}
	if d := diffStream(&info.Config, want); len(d) > 0 {
		it.change.Action = ActionUpdate
		it.change.Details = d
		it.steps = append(it.steps, p.r.updateStream(mergeStream(&info.Config, want)))
	}
	p.planDLQ(ctx, it, t.Name, t.Owner, t.Replicas)
	p.add(it)
}

func topicCreateDetails(t TopicSpec) []string {
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
	for _, kv := range [][2]string{{"key", t.Key}, {"owner", t.Owner}, {"residency", t.Residency}} {
		if kv[1] != "" {
			d = append(d, kv[0]+": "+kv[1])
		}
	}
	return d
}
