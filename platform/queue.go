package platform

import (
	"github.com/nats-io/nats.go/jetstream"
)

// QueueConsumer is the durable pull consumer every worker of a queue
// shares: each job goes to one worker at a time, under a lease.
const QueueConsumer = "workers"

// QueueStreamConfig is the work-queue stream backing a queue: subjects
// <name>.>, a job is deleted once acknowledged.
func QueueStreamConfig(q QueueSpec) jetstream.StreamConfig {
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
		Duplicates:  DuplicateWindow,
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

// QueueConsumerConfig is the queue's shared consumer: the lease is the ack
// wait, attempts the max deliveries. Replicas 0 follows the stream (a
// work-queue consumer must match its stream's replicas).
func QueueConsumerConfig(q QueueSpec) jetstream.ConsumerConfig {
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
