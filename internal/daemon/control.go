package daemon

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
)

func (d *Daemon) serveControl() (micro.Service, error) {
	v, err := d.newVerifier()
	if err != nil {
		return nil, err
	}
	eps := []control.Endpoint{
		{Name: "status", Subject: control.SubjStatus, Handle: control.JSON(func(ctx context.Context, _ struct{}) (control.Status, error) {
			return d.Status(ctx)
		})},
		{Name: "topic_apply", Subject: control.SubjTopicApply, Handle: control.JSON(func(ctx context.Context, r control.ApplyTopicRequest) (catalog.Change, error) {
			return d.applyTopic(ctx, r.Spec, r.Options)
		})},
		{Name: "topic_list", Subject: control.SubjTopicList, Handle: control.JSON(func(ctx context.Context, _ struct{}) ([]catalog.TopicInfo, error) {
			return d.rec.ListTopics(ctx)
		})},
		{Name: "topic_describe", Subject: control.SubjTopicDescribe, Handle: control.JSON(func(ctx context.Context, r control.NameRequest) (catalog.TopicStatus, error) {
			return d.rec.DescribeTopic(ctx, r.Name)
		})},
		{Name: "queue_apply", Subject: control.SubjQueueApply, Handle: control.JSON(func(ctx context.Context, r control.ApplyQueueRequest) (catalog.Change, error) {
			return d.applyQueue(ctx, r.Spec, r.Options)
		})},
		{Name: "queue_list", Subject: control.SubjQueueList, Handle: control.JSON(func(ctx context.Context, _ struct{}) ([]catalog.QueueInfo, error) {
			return d.rec.ListQueues(ctx)
		})},
		{Name: "queue_describe", Subject: control.SubjQueueDescribe, Handle: control.JSON(func(ctx context.Context, r control.NameRequest) (catalog.QueueStatus, error) {
			return d.rec.DescribeQueue(ctx, r.Name)
		})},
		{Name: "group_apply", Subject: control.SubjGroupApply, Handle: control.JSON(func(ctx context.Context, r control.ApplyGroupRequest) (catalog.Change, error) {
			return d.rec.ApplyGroup(ctx, r.Spec, r.Options)
		})},
	}
	eps = append(eps, d.tenancyEndpoints()...)
	eps = append(eps, d.groupEndpoints()...)
	eps = append(eps, d.redriveEndpoints(v)...)
	eps = append(eps, d.roleEndpoints(v)...)
	eps = append(eps, d.resetReviewEndpoints(v)...)
	eps = append(eps, d.operatorEndpoints(v)...)
	eps = append(eps, d.schemaEndpoints()...)
	eps = append(eps, d.regionEndpoints()...)
	for i := range eps {
		h, name := eps[i].Handle, eps[i].Name
		eps[i].Handle = func(ctx context.Context, body []byte) (any, error) {
			resp, err := h(ctx, body)
			outcome := "ok"
			if err != nil {
				outcome = strconv.Itoa(classify(err))
				if outcome == "0" {
					outcome = "error"
				}
			}
			d.own.control.WithLabelValues(name, outcome).Inc()
			return resp, err
		}
	}
	return control.Serve(d.nc, eps, classify, 30*time.Second)
}

// mappedEP is the endpoint name on subject served by fn, its errors
// mapped onto the control API's kinds by kinds.
func mappedEP[Req, Resp any](name, subject string, kinds func(error) error, fn func(ctx context.Context, req Req) (Resp, error)) control.Endpoint {
	return control.Endpoint{Name: name, Subject: subject, Handle: control.JSON(func(ctx context.Context, r Req) (Resp, error) {
		resp, err := fn(ctx, r)
		return resp, kinds(err)
	})}
}

// classify maps platform errors to control API codes.
func classify(err error) int {
	switch {
	case errors.Is(err, platform.ErrInvalidSpec), errors.Is(err, control.ErrInvalid):
		return control.CodeInvalid
	case errors.Is(err, platform.ErrNotFound), errors.Is(err, control.ErrNotFound):
		return control.CodeNotFound
	case errors.Is(err, platform.ErrConflict), errors.Is(err, control.ErrConflict):
		return control.CodeConflict
	}
	return 0
}

// Status reports the region's meta group as a local node sees it and the
// replica health of every stream in the platform account.
func (d *Daemon) Status(ctx context.Context) (control.Status, error) {
	st := control.Status{Region: d.region.Name, Domain: d.region.Domain, Time: time.Now().UTC()}
	var srv *server.Server
	for _, n := range d.nodes {
		if s := n.Server(); s != nil {
			srv = s
			break
		}
	}
	if srv == nil {
		return st, errors.New("daemon: no local node is running")
	}
	st.Server = srv.Name()
	jsz, err := srv.Jsz(nil)
	if err != nil {
		return st, fmt.Errorf("daemon: jsz: %w", err)
	}
	if m := jsz.Meta; m != nil {
		st.MetaLeader = m.Leader
		// m.Replicas lists the peers other than the answering server, as
		// it sees them; the answering server itself is current (it
		// answered) and the leader may be either.
		nodes := map[string]control.NodeStatus{srv.Name(): {Name: srv.Name(), Current: true}}
		for _, r := range m.Replicas {
			if r.Name == srv.Name() {
				continue
			}
			nodes[r.Name] = control.NodeStatus{Name: r.Name, Current: r.Current, Offline: r.Offline, Active: r.Active, Lag: r.Lag}
		}
		if m.Leader != "" {
			n := nodes[m.Leader]
			n.Name, n.Leader = m.Leader, true
			if m.Leader == srv.Name() || !n.Offline {
				n.Current = true
			}
			nodes[m.Leader] = n
		}
		for _, n := range nodes {
			st.Nodes = append(st.Nodes, n)
		}
		sort.Slice(st.Nodes, func(i, j int) bool { return st.Nodes[i].Name < st.Nodes[j].Name })
	} else {
		st.MetaLeader = srv.Name()
		st.Nodes = []control.NodeStatus{{Name: srv.Name(), Leader: true, Current: true}}
	}
	lister := d.js.ListStreams(ctx)
	for info := range lister.Info() {
		ss := control.StreamStatus{
			Name:     info.Config.Name,
			Kind:     info.Config.Metadata["platform.kind"],
			Replicas: info.Config.Replicas,
			Messages: info.State.Msgs,
			Bytes:    info.State.Bytes,
		}
		if c := info.Cluster; c != nil {
			ss.Leader = c.Leader
			for _, p := range c.Replicas {
				ss.Peers = append(ss.Peers, control.ReplicaPeer{Name: p.Name, Current: p.Current, Offline: p.Offline, Lag: p.Lag, Active: p.Active})
			}
		} else {
			ss.Leader = srv.Name()
		}
		st.Streams = append(st.Streams, ss)
	}
	if err := lister.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return st, fmt.Errorf("daemon: list streams: %w", err)
	}
	sort.Slice(st.Streams, func(i, j int) bool { return st.Streams[i].Name < st.Streams[j].Name })
	return st, nil
}
