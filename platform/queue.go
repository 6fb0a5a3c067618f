package platform

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// QueueConsumer is the durable pull consumer every worker of a queue
// shares: each job goes to one worker at a time, under a lease.
const QueueConsumer = "workers"

// queueStreamConfig is the work-queue stream backing a queue: subjects
// <name>.>, a job is deleted once acknowledged.
func queueStreamConfig(q QueueSpec) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        StreamName(q.Name),
		Description: "platform queue " + q.Name,
		Subjects:    []string{q.Name + ".>"},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    q.Replicas,
		MaxBytes:    -1,
		Discard:     jetstream.DiscardOld,
		AllowDirect: true,
		Duplicates:  duplicateWindow,
		Metadata:    queueStreamMetadata(q),
	}
}

// queueStreamMetadata is the queue's record on its stream: queueMetadata
// and its residency (what the residency gate, guard, report and link deny
// list read, as for a topic).
func queueStreamMetadata(q QueueSpec) map[string]string {
	md := queueMetadata(q)
	setIf(md, MetaResidency, q.Residency)
	return md
}

// queueConsumerConfig is the queue's shared consumer: the lease is the ack
// wait, attempts the max deliveries. Replicas 0 follows the stream (a
// work-queue consumer must match its stream's replicas).
func queueConsumerConfig(q QueueSpec) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Name:          QueueConsumer,
		Durable:       QueueConsumer,
		Description:   "platform queue " + q.Name + " workers",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       q.Lease,
		MaxDeliver:    q.MaxAttempts,
		Metadata:      map[string]string{MetaQueue: q.Name},
	}
}

func (p *plan) planQueue(ctx context.Context, q QueueSpec) {
	key := "queues." + q.Name
	want := queueStreamConfig(q)
	wantC := queueConsumerConfig(q)
	info, err := p.stream(ctx, want.Name)
	if err != nil {
		p.failRead(err)
		return
	}
	it := &planItem{change: Change{Kind: KindQueue, Name: q.Name}}
	if info == nil {
		p.checkSubjects(ctx, key, want)
		it.change.Action = ActionCreate
		it.change.Details = []string{
			fmt.Sprintf("lease: %s", q.Lease),
			fmt.Sprintf("max_attempts: %d", q.MaxAttempts),
			fmt.Sprintf("replicas: %d", q.Replicas),
			fmt.Sprintf("subjects: %s.> (consumer %q)", q.Name, QueueConsumer),
		}
		if q.Owner != "" {
			it.change.Details = append(it.change.Details, "owner: "+q.Owner)
		}
		if q.Residency != "" {
			it.change.Details = append(it.change.Details, "residency: "+q.Residency)
		}
		it.steps = append(it.steps, p.r.createStream(want), p.r.createConsumer(want.Name, wantC))
		p.planDLQ(ctx, it, q.Name, q.DLQSettings(), q.Replicas)
		p.add(it)
		return
	}
	if !p.checkStreamName(key, info, StreamKindQueue) {
		return
	}
	cur, err := queueFromStream(&info.Config)
	if err != nil {
		p.conflict(key, "%v; the queue's record is damaged, inspect the stream before applying", err)
		return
	}
	p.checkReplicas(key, "queue", cur.Replicas, q.Replicas)
	if info.Config.Storage != want.Storage || info.Config.Retention != want.Retention {
		p.conflict(key, "stream %q has %s storage and %s retention, which cannot be changed in place (want %s, %s); recreate the queue",
			want.Name, info.Config.Storage, info.Config.Retention, want.Storage, want.Retention)
	}
	if d := diffStream(&info.Config, want); len(d) > 0 {
		it.change.Details = append(it.change.Details, d...)
		it.steps = append(it.steps, p.r.updateStream(mergeStream(&info.Config, want)))
	}
	consumers, err := p.streamConsumers(ctx, want.Name)
	if err != nil {
		p.failRead(err)
		return
	}
	switch ci := consumers[QueueConsumer]; {
	case ci == nil:
		it.change.Details = append(it.change.Details, fmt.Sprintf("consumer %s: create", QueueConsumer))
		it.steps = append(it.steps, p.r.createConsumer(want.Name, wantC))
	case len(immutableConsumer(&ci.Config, wantC)) > 0:
		p.conflict(key, "consumer %q has %v, which cannot be changed in place; delete it (in-flight leases are lost) and apply again",
			QueueConsumer, immutableConsumer(&ci.Config, wantC))
	default:
		if d := diffConsumer("consumer "+QueueConsumer+": ", &ci.Config, wantC); len(d) > 0 {
			it.change.Details = append(it.change.Details, d...)
			it.steps = append(it.steps, p.r.updateConsumer(want.Name, mergeConsumer(&ci.Config, wantC)))
		}
	}
	it.change.Action = ActionUpdate
	p.planDLQ(ctx, it, q.Name, q.DLQSettings(), q.Replicas)
	p.add(it)
}
