package catalog

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/platform"
)

// The read side: what `platformctl topic list|describe` and `queue list`
// show, and what the control API returns as JSON. Specs are read back from
// stream metadata (the replicated record Apply writes); streams the
// platform does not manage are skipped.

// ReplicaStatus is one copy of a stream.
type ReplicaStatus struct {
	Name    string `json:"name"`
	Leader  bool   `json:"leader,omitempty"`
	Current bool   `json:"current"`
	Offline bool   `json:"offline,omitempty"`
	// Lag is how many operations the replica is behind the leader.
	Lag uint64 `json:"lag,omitempty"`
	// Active is how long ago the leader last heard from the replica.
	Active time.Duration `json:"active,omitempty"`
}

// ClusterStatus is where a stream's copies are and how current they are.
type ClusterStatus struct {
	Name   string `json:"name,omitempty"`
	Leader string `json:"leader,omitempty"`
	// Replicas lists the leader first, then the followers.
	Replicas []ReplicaStatus `json:"replicas,omitempty"`
}

// StreamStatus is the state of the stream backing a topic or queue.
type StreamStatus struct {
	Name      string        `json:"name"`
	Messages  uint64        `json:"messages"`
	Bytes     uint64        `json:"bytes"`
	FirstSeq  uint64        `json:"first_seq"`
	LastSeq   uint64        `json:"last_seq"`
	FirstTime time.Time     `json:"first_time"`
	LastTime  time.Time     `json:"last_time"`
	Consumers int           `json:"consumers"`
	Cluster   ClusterStatus `json:"cluster"`
}

// TopicInfo is one line of `topic list`.
type TopicInfo struct {
	Spec   platform.TopicSpec `json:"spec"`
	Stream StreamStatus       `json:"stream"`
}

// QueueInfo is one line of `queue list`.
type QueueInfo struct {
	Spec   platform.QueueSpec `json:"spec"`
	Stream StreamStatus       `json:"stream"`
}

// ListTopics returns every platform topic, sorted by name.
func (r *Reconciler) ListTopics(ctx context.Context) ([]TopicInfo, error) {
	return listKind(ctx, r, platform.StreamKindTopic, platform.TopicFromStream, func(spec platform.TopicSpec, st StreamStatus) (string, TopicInfo) {
		return spec.Name, TopicInfo{Spec: spec, Stream: st}
	})
}

// ListQueues returns every platform queue, sorted by name.
func (r *Reconciler) ListQueues(ctx context.Context) ([]QueueInfo, error) {
	return listKind(ctx, r, platform.StreamKindQueue, platform.QueueFromStream, func(spec platform.QueueSpec, st StreamStatus) (string, QueueInfo) {
		return spec.Name, QueueInfo{Spec: spec, Stream: st}
	})
}

// listKind returns item(spec, status) for every platform stream of kind,
// its spec read back by fromStream, sorted by the name item returns (never
// nil); a stream whose record is damaged is skipped with a warning.
func listKind[S, I any](ctx context.Context, r *Reconciler, kind string, fromStream func(*jetstream.StreamConfig) (S, error), item func(S, StreamStatus) (string, I)) ([]I, error) {
	infos, err := r.listStreams(ctx)
	if err != nil {
		return nil, err
	}
	type named struct {
		name string
		item I
	}
	var found []named
	for _, si := range infos {
		if platform.StreamKind(&si.Config) != kind {
			continue
		}
		spec, err := fromStream(&si.Config)
		if err != nil {
			r.log.Warn("platform: skipping "+kind+" with damaged record", "stream", si.Config.Name, "err", err)
			continue
		}
		n, it := item(spec, streamStatus(si))
		found = append(found, named{n, it})
	}
	slices.SortFunc(found, func(a, b named) int { return cmp.Compare(a.name, b.name) })
	out := make([]I, 0, len(found))
	for _, f := range found {
		out = append(out, f.item)
	}
	return out, nil
}

// listStreams reads the info of every stream (paged).
func (r *Reconciler) listStreams(ctx context.Context) ([]*jetstream.StreamInfo, error) {
	var infos []*jetstream.StreamInfo
	err := r.do(ctx, "list streams", func(ctx context.Context) error {
		infos = infos[:0]
		l := r.js.ListStreams(ctx)
		for si := range l.Info() {
			infos = append(infos, si)
		}
		return l.Err()
	})
	return infos, err
}

func streamStatus(si *jetstream.StreamInfo) StreamStatus {
	st := StreamStatus{
		Name:      si.Config.Name,
		Messages:  si.State.Msgs,
		Bytes:     si.State.Bytes,
		FirstSeq:  si.State.FirstSeq,
		LastSeq:   si.State.LastSeq,
		FirstTime: si.State.FirstTime,
		LastTime:  si.State.LastTime,
		Consumers: si.State.Consumers,
		Cluster:   clusterStatus(si.Cluster),
	}
	return st
}

func clusterStatus(ci *jetstream.ClusterInfo) ClusterStatus {
	if ci == nil {
		return ClusterStatus{}
	}
	cs := ClusterStatus{Name: ci.Name, Leader: ci.Leader}
	if ci.Leader != "" {
		cs.Replicas = append(cs.Replicas, ReplicaStatus{Name: ci.Leader, Leader: true, Current: true})
	}
	for _, p := range ci.Replicas {
		if p == nil {
			continue
		}
		cs.Replicas = append(cs.Replicas, ReplicaStatus{
			Name: p.Name, Current: p.Current, Offline: p.Offline, Lag: p.Lag, Active: p.Active,
		})
	}
	return cs
}
