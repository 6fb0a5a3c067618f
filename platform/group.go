package platform

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Group consumer settings. The group runtime (a later layer) pulls from
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
		mdTopic:       g.Topic,
		MetaPartition: strconv.Itoa(p),
	}
	if g.Tolerance > 0 {
		md[mdTolerance] = g.Tolerance.String()
	}
	return md
}

// planGroup plans a group's N partition consumers. topic is the group's
// topic as declared in the same catalog, or nil to read it from the
// server (it must exist).
func (p *plan) planGroup(ctx context.Context, g GroupSpec, topic *TopicSpec) {
	key := "groups." + g.Name
	stream := StreamName(g.Topic)
	info, err := p.stream(ctx, stream)
	if err != nil {
		p.failRead(err)
		return
	}
	var partitions int
	switch {
	case topic != nil:
		if info != nil && StreamKind(&info.Config) != StreamKindTopic {
			return // the topic's own plan reports the conflict
		}
		partitions = topic.Partitions
	case info == nil || StreamKind(&info.Config) != StreamKindTopic:
		p.missing.Addf(key+".topic", "no topic %q exists; declare and apply the topic first", g.Topic)
		return
	default:
		t, err := TopicFromStream(&info.Config)
		if err != nil {
			p.conflict(key+".topic", "%v; inspect the topic's stream before applying", err)
			return
		}
		partitions = t.Partitions
	}
	existing := map[string]*jetstream.ConsumerInfo{}
	if info != nil {
		if existing, err = p.streamConsumers(ctx, stream); err != nil {
			p.failRead(err)
			return
		}
	}

	it := &planItem{change: Change{Kind: KindGroup, Name: g.Name, Action: ActionUpdate}}
	var ops []func(context.Context) error
	var created int
	for part := range partitions {
		want := GroupConsumerConfig(g, part)
		ci := existing[want.Durable]
		switch {
		case ci == nil:
			created++
			ops = append(ops, p.r.createConsumer(stream, want))
		case ci.Config.Metadata[MetaGroup] != g.Name:
			p.conflict(key, "consumer %q on stream %q exists and is not managed by the platform for this group; rename the group or delete the consumer", want.Durable, stream)
		case len(immutableConsumer(&ci.Config, want)) > 0:
			p.conflict(key, "consumer %q has %v, which cannot be changed in place; delete it (the group's position on partition %d is lost) and apply again",
				want.Durable, immutableConsumer(&ci.Config, want), part)
		default:
			if d := diffConsumer(fmt.Sprintf("partition %d: ", part), &ci.Config, want); len(d) > 0 {
				it.change.Details = append(it.change.Details, d...)
				ops = append(ops, p.r.updateConsumer(stream, mergeConsumer(&ci.Config, want)))
			}
		}
	}
	// A group has exactly one consumer per partition: remove strays (e.g.
	// left by a topic that was deleted and recreated smaller).
	for _, name := range sortedKeys(existing) {
		ci := existing[name]
		if ci.Config.Metadata[MetaGroup] != g.Name {
			continue
		}
		if n, err := strconv.Atoi(ci.Config.Metadata[MetaPartition]); err == nil && n < partitions && name == PartitionConsumer(g.Name, n) {
			continue
		}
		it.change.Details = append(it.change.Details, fmt.Sprintf("delete consumer %s (not a partition of the %d-partition topic)", name, partitions))
		ops = append(ops, p.r.deleteConsumer(stream, name))
	}

	switch {
	case created == partitions:
		it.change.Action = ActionCreate
		it.change.Details = append([]string{
			fmt.Sprintf("topic: %s", g.Topic),
			fmt.Sprintf("consumers: %d (%s .. %s), one per partition, pinned client, ack_wait %s, max_ack_pending %d",
				partitions, PartitionConsumer(g.Name, 0), PartitionConsumer(g.Name, partitions-1), GroupAckWait, groupMaxAckPending),
		}, it.change.Details...)
	case created > 0:
		it.change.Details = append(it.change.Details, fmt.Sprintf("create %d missing partition consumer(s)", created))
	}
	if len(ops) > 0 {
		it.steps = append(it.steps, func(ctx context.Context) error { return parallel(ctx, 8, ops) })
	}
	p.add(it)
}

// parallel runs ops with at most n at a time and returns the first error.
func parallel(ctx context.Context, n int, ops []func(context.Context) error) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs error
		sem  = make(chan struct{}, n)
	)
	for _, op := range ops {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := op(ctx); err != nil {
				mu.Lock()
				if errs == nil {
					errs = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errs
}
