package catalog

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/parallel"
	"github.com/msgplatform/platform/platform"
)

// planGroup plans a group's N partition consumers. topic is the group's
// topic as declared in the same catalog, or nil to read it from the
// server (it must exist).
func (p *plan) planGroup(ctx context.Context, g platform.GroupSpec, topic *platform.TopicSpec) {
	key := "groups." + g.Name
	stream := platform.StreamName(g.Topic)
	info, err := p.stream(ctx, stream)
	if err != nil {
		p.failRead(err)
		return
	}
	var partitions int
	switch {
	case topic != nil:
		if info != nil && platform.StreamKind(&info.Config) != platform.StreamKindTopic {
			return // the topic's own plan reports the conflict
		}
		partitions = topic.Partitions
	case info == nil || platform.StreamKind(&info.Config) != platform.StreamKindTopic:
		p.missing.Addf(key+".topic", "no topic %q exists; declare and apply the topic first", g.Topic)
		return
	default:
		t, err := platform.TopicFromStream(&info.Config)
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
		want := platform.GroupConsumerConfig(g, part)
		ci := existing[want.Durable]
		switch {
		case ci == nil:
			created++
			ops = append(ops, p.r.createConsumer(stream, want))
		case ci.Config.Metadata[platform.MetaGroup] != g.Name:
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
	for _, name := range slices.Sorted(maps.Keys(existing)) {
		ci := existing[name]
		if ci.Config.Metadata[platform.MetaGroup] != g.Name {
			continue
		}
		if n, err := strconv.Atoi(ci.Config.Metadata[platform.MetaPartition]); err == nil && n < partitions && name == platform.PartitionConsumer(g.Name, n) {
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
				partitions, platform.PartitionConsumer(g.Name, 0), platform.PartitionConsumer(g.Name, partitions-1), platform.GroupAckWait, platform.GroupConsumerConfig(g, 0).MaxAckPending),
		}, it.change.Details...)
	case created > 0:
		it.change.Details = append(it.change.Details, fmt.Sprintf("create %d missing partition consumer(s)", created))
	}
	if len(ops) > 0 {
		it.steps = append(it.steps, func(ctx context.Context) error { return parallel.Run(ctx, 8, ops) })
	}
	p.add(it)
}
