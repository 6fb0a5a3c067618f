package catalog

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/parallel"
	"github.com/msgplatform/platform/platform"
)

// TopicStatus is `topic describe`: the spec, the stream, every partition
// and every group.
type TopicStatus struct {
	TopicInfo
	// At is when the status was read; ages are relative to it.
	At         time.Time         `json:"at"`
	Partitions []PartitionStatus `json:"partitions"`
	Groups     []GroupStatus     `json:"groups"`
}

// PartitionStatus is one partition of a topic.
type PartitionStatus struct {
	Partition int    `json:"partition"`
	Subject   string `json:"subject"`
	Messages  uint64 `json:"messages"`
}

// GroupStatus is a group's progress over its topic.
type GroupStatus struct {
	Name string `json:"name"`
	// Pending is what the group has not acknowledged yet: not delivered
	// plus delivered and awaiting ack, over all partitions.
	Pending uint64 `json:"pending"`
	// OldestAge is the age of the oldest unacknowledged event over all
	// partitions (0 when nothing is pending): the group's lag in time.
	OldestAge  time.Duration          `json:"oldest_age"`
	Partitions []GroupPartitionStatus `json:"partitions"`
	// MissingPartitions lists partitions without a consumer (apply the
	// group to repair).
	MissingPartitions []int `json:"missing_partitions,omitempty"`
}

// GroupPartitionStatus is a group's position on one partition.
type GroupPartitionStatus struct {
	Partition   int    `json:"partition"`
	Consumer    string `json:"consumer"`
	Pending     uint64 `json:"pending"`     // undelivered + in flight
	Undelivered uint64 `json:"undelivered"` // not yet delivered to any member
	InFlight    int    `json:"in_flight"`   // delivered, awaiting ack
	Redelivered int    `json:"redelivered"`
	// AckFloor is the stream sequence below which everything on the
	// partition is acknowledged.
	AckFloor  uint64        `json:"ack_floor"`
	OldestAge time.Duration `json:"oldest_age"`
	// Pinned is the id of the member owning the partition ("" if none).
	Pinned string `json:"pinned,omitempty"`
}

// DescribeTopic reads a topic's spec, stream, partitions and groups.
//
// Per-partition message counts come from one batched direct get per
// partition (see countMatching): the server's per-subject index answers
// how many stored subjects match <topic>.<p>.*, without creating a
// consumer. If the counts add up to fewer messages than the leader
// reported (a replica that served a count was a moment behind), they are
// read again, a few times.
//
// A group's pending is NumPending + NumAckPending of its partition
// consumers. A partition's oldest age is the age of the first event on the
// partition after the consumer's ack floor (a direct get with
// next_by_subj from AckFloor+1): everything before the floor is
// acknowledged, so that event is the oldest unprocessed one.
func (r *Reconciler) DescribeTopic(ctx context.Context, name string) (TopicStatus, error) {
	stream, si, spec, err := platformSpec(ctx, r, name, platform.StreamKindTopic, platform.TopicFromStream)
	if err != nil {
		return TopicStatus{}, err
	}
	counts, si, err := r.partitionCounts(ctx, stream, spec, si)
	if err != nil {
		return TopicStatus{}, err
	}
	consumers, err := r.listConsumers(ctx, si.Config.Name)
	if err != nil {
		return TopicStatus{}, err
	}
	st := TopicStatus{
		TopicInfo:  TopicInfo{Spec: spec, Stream: streamStatus(si)},
		At:         time.Now(),
		Partitions: make([]PartitionStatus, spec.Partitions),
		Groups:     []GroupStatus{},
	}
	for p := range spec.Partitions {
		st.Partitions[p] = PartitionStatus{Partition: p, Subject: platform.PartitionSubject(spec.Name, p), Messages: counts[p]}
	}

	byGroup := map[string]map[int]*jetstream.ConsumerInfo{}
	for _, ci := range consumers {
		g := ci.Config.Metadata[platform.MetaGroup]
		p, err := strconv.Atoi(ci.Config.Metadata[platform.MetaPartition])
		if g == "" || err != nil || p < 0 || p >= spec.Partitions {
			continue
		}
		if byGroup[g] == nil {
			byGroup[g] = map[int]*jetstream.ConsumerInfo{}
		}
		byGroup[g][p] = ci
	}
	var (
		ops []func(context.Context) error
		mu  sync.Mutex
	)
	for _, g := range slices.Sorted(maps.Keys(byGroup)) {
		gs := GroupStatus{Name: g, Partitions: []GroupPartitionStatus{}}
		for p := range spec.Partitions {
			ci := byGroup[g][p]
			if ci == nil {
				gs.MissingPartitions = append(gs.MissingPartitions, p)
				continue
			}
			gp := GroupPartitionStatus{
				Partition:   p,
				Consumer:    ci.Name,
				Undelivered: ci.NumPending,
				InFlight:    ci.NumAckPending,
				Redelivered: ci.NumRedelivered,
				Pending:     ci.NumPending + uint64(ci.NumAckPending),
				AckFloor:    ci.AckFloor.Stream,
			}
			for _, pg := range ci.PriorityGroups {
				if pg.Group == g {
					gp.Pinned = pg.PinnedClientID
				}
			}
			gs.Pending += gp.Pending
			gs.Partitions = append(gs.Partitions, gp)
		}
		st.Groups = append(st.Groups, gs)
	}
	// Oldest unprocessed event per (group, partition) with anything pending.
	for gi := range st.Groups {
		for pi := range st.Groups[gi].Partitions {
			gp := &st.Groups[gi].Partitions[pi]
			if gp.Pending == 0 {
				continue
			}
			ops = append(ops, func(ctx context.Context) error {
				var ts time.Time
				err := r.do(ctx, "read oldest pending of "+gp.Consumer, func(ctx context.Context) error {
					m, err := stream.GetMsg(ctx, gp.AckFloor+1, jetstream.WithGetMsgSubject(platform.PartitionSubject(spec.Name, gp.Partition)))
					if errors.Is(err, jetstream.ErrMsgNotFound) {
						return nil // acknowledged or expired meanwhile
					}
					if err != nil {
						return err
					}
					ts = m.Time
					return nil
				})
				if err != nil || ts.IsZero() {
					return err
				}
				mu.Lock()
				gp.OldestAge = max(st.At.Sub(ts), 0)
				mu.Unlock()
				return nil
			})
		}
	}
	if err := parallel.Run(ctx, 16, ops); err != nil {
		return TopicStatus{}, err
	}
	for gi := range st.Groups {
		for _, gp := range st.Groups[gi].Partitions {
			st.Groups[gi].OldestAge = max(st.Groups[gi].OldestAge, gp.OldestAge)
		}
	}
	return st, nil
}

// partitionCounts counts every partition's messages, re-reading (at most
// 5 times) while the sum is below the leader's message count; it returns
// the stream info the counts were checked against.
func (r *Reconciler) partitionCounts(ctx context.Context, stream jetstream.Stream, spec platform.TopicSpec, si *jetstream.StreamInfo) ([]uint64, *jetstream.StreamInfo, error) {
	counts := make([]uint64, spec.Partitions)
	for round := 0; ; round++ {
		ops := make([]func(context.Context) error, spec.Partitions)
		for p := range spec.Partitions {
			ops[p] = func(ctx context.Context) error {
				return r.do(ctx, "count "+platform.PartitionSubject(spec.Name, p), func(ctx context.Context) error {
					n, err := r.countMatching(ctx, si.Config.Name, platform.PartitionSubject(spec.Name, p))
					counts[p] = n
					return err
				})
			}
		}
		if err := parallel.Run(ctx, 16, ops); err != nil {
			return nil, nil, err
		}
		var sum uint64
		for _, n := range counts {
			sum += n
		}
		if sum >= si.State.Msgs || round == 4 {
			return counts, si, nil
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if err := r.do(ctx, "read stream "+si.Config.Name, func(ctx context.Context) error {
			info, err := stream.Info(ctx)
			if err == nil {
				si = info
			}
			return err
		}); err != nil {
			return nil, nil, err
		}
	}
}

// QueueStatus is `queue describe`.
type QueueStatus struct {
	QueueInfo
	At time.Time `json:"at"`
	// Pending jobs have not been handed to a worker yet.
	Pending uint64 `json:"pending"`
	// InFlight jobs are leased to a worker and not acknowledged.
	InFlight int `json:"in_flight"`
	// Redelivered jobs were handed out more than once (lease expired or
	// nak).
	Redelivered int `json:"redelivered"`
	// Waiting is the number of worker pull requests waiting for jobs.
	Waiting int `json:"waiting"`
	// OldestAge is the age of the oldest job not yet acknowledged (0 when
	// the queue is empty): a work queue deletes acknowledged jobs, so it is
	// the age of the stream's first message.
	OldestAge time.Duration `json:"oldest_age"`
	// Workers are the queue's Workers instances by their sessions (see
	// platform.WorkerSessionsBucket), lost ones included until a peer reclaims
	// them; nil when they could not be read (WorkersError says why).
	Workers      []platform.WorkerSession `json:"workers"`
	WorkersError string                   `json:"workers_error,omitempty"`
}

// DescribeQueue reads a queue's spec, stream and consumer.
func (r *Reconciler) DescribeQueue(ctx context.Context, name string) (QueueStatus, error) {
	_, si, spec, err := platformSpec(ctx, r, name, platform.StreamKindQueue, platform.QueueFromStream)
	if err != nil {
		return QueueStatus{}, err
	}
	var ci *jetstream.ConsumerInfo
	err = r.do(ctx, "read consumer "+si.Config.Name+"/"+platform.QueueConsumer, func(ctx context.Context) error {
		c, err := r.js.Consumer(ctx, si.Config.Name, platform.QueueConsumer)
		if err != nil {
			return err
		}
		ci = c.CachedInfo()
		return nil
	})
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return QueueStatus{}, fmt.Errorf("%w: queue %q has no %q consumer; apply the queue to repair it", platform.ErrNotFound, name, platform.QueueConsumer)
	}
	if err != nil {
		return QueueStatus{}, err
	}
	st := QueueStatus{
		QueueInfo:   QueueInfo{Spec: spec, Stream: streamStatus(si)},
		At:          time.Now(),
		Pending:     ci.NumPending,
		InFlight:    ci.NumAckPending,
		Redelivered: ci.NumRedelivered,
		Waiting:     ci.NumWaiting,
	}
	if si.State.Msgs > 0 && !si.State.FirstTime.IsZero() {
		st.OldestAge = max(st.At.Sub(si.State.FirstTime), 0)
	}
	if st.Workers, err = queueWorkers(ctx, r.js, name, st.At); err != nil {
		st.WorkersError = err.Error()
	} else if st.Workers == nil {
		st.Workers = []platform.WorkerSession{}
	}
	return st, nil
}

// platformStream reads the stream of the named topic or queue;
// platform.ErrNotFound if there is none of that kind.
func (r *Reconciler) platformStream(ctx context.Context, name, kind string) (jetstream.Stream, *jetstream.StreamInfo, error) {
	var s jetstream.Stream
	err := r.do(ctx, "read "+kind+" "+name, func(ctx context.Context) error {
		var err error
		s, err = r.js.Stream(ctx, platform.StreamName(name))
		return err
	})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil, fmt.Errorf("%w: no %s %q", platform.ErrNotFound, kind, name)
	}
	if err != nil {
		return nil, nil, err
	}
	si := s.CachedInfo()
	if platform.StreamKind(&si.Config) != kind {
		return nil, nil, fmt.Errorf("%w: no %s %q (stream %q is not one)", platform.ErrNotFound, kind, name, si.Config.Name)
	}
	return s, si, nil
}

// platformSpec returns the stream of the platform object name of kind,
// its info and the spec fromStream reads back from it.
func platformSpec[S any](ctx context.Context, r *Reconciler, name, kind string, fromStream func(*jetstream.StreamConfig) (S, error)) (jetstream.Stream, *jetstream.StreamInfo, S, error) {
	s, si, err := r.platformStream(ctx, name, kind)
	if err != nil {
		var zero S
		return nil, nil, zero, err
	}
	spec, err := fromStream(&si.Config)
	return s, si, spec, err
}
