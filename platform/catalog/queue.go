package catalog

import (
	"context"
	"fmt"

	"github.com/msgplatform/platform/platform"
)

func (p *plan) planQueue(ctx context.Context, q platform.QueueSpec) {
	key := "queues." + q.Name
	want := platform.QueueStreamConfig(q)
	wantC := platform.QueueConsumerConfig(q)
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
			fmt.Sprintf("subjects: %s.> (consumer %q)", q.Name, platform.QueueConsumer),
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
	cur, ok := existingSpec(p, key, platform.StreamKindQueue, info, platform.QueueFromStream)
	if !ok {
		return
	}
	p.checkReplicas(key, "queue", cur.Replicas, q.Replicas)
	p.checkStorage(key, "queue", &info.Config, want)
	if d := diffStream(&info.Config, want); len(d) > 0 {
		it.change.Details = append(it.change.Details, d...)
		it.steps = append(it.steps, p.r.updateStream(mergeStream(&info.Config, want)))
	}
	consumers, err := p.streamConsumers(ctx, want.Name)
	if err != nil {
		p.failRead(err)
		return
	}
	switch ci := consumers[platform.QueueConsumer]; {
	case ci == nil:
		it.change.Details = append(it.change.Details, fmt.Sprintf("consumer %s: create", platform.QueueConsumer))
		it.steps = append(it.steps, p.r.createConsumer(want.Name, wantC))
	case len(immutableConsumer(&ci.Config, wantC)) > 0:
		p.conflict(key, "consumer %q has %v, which cannot be changed in place; delete it (in-flight leases are lost) and apply again",
			platform.QueueConsumer, immutableConsumer(&ci.Config, wantC))
	default:
		if d := diffConsumer("consumer "+platform.QueueConsumer+": ", &ci.Config, wantC); len(d) > 0 {
			it.change.Details = append(it.change.Details, d...)
			it.steps = append(it.steps, p.r.updateConsumer(want.Name, mergeConsumer(&ci.Config, wantC)))
		}
	}
	it.change.Action = ActionUpdate
	p.planDLQ(ctx, it, q.Name, q.DLQSettings(), q.Replicas)
	p.add(it)
}
