package region

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgplatform/platform/platform"
)

// Mirroring of a non-resident topic to another region: a stream of the
// same name in the destination region's domain with Mirror{Name, Domain}
// of the origin. JetStream copies asynchronously over the region link and
// keeps the origin's sequence numbers 1:1 (what failover translates
// consumer positions with). Residency is checked before anything is
// created (CheckStream): a resident topic, and its DLQ streams, are
// refused with ErrResidency.

// MirrorRequest asks for topic (living in region From, "" = wherever it
// is) to be mirrored to region To.
type MirrorRequest struct {
	Topic string `json:"topic"`
	From  string `json:"from,omitempty"`
	To    string `json:"to"`
	// Replicas of the mirror (0: the topic's).
	Replicas int `json:"replicas,omitempty"`
}

// MirrorStatus is a mirror and how far behind its origin it is.
type MirrorStatus struct {
	Topic  string `json:"topic"`
	From   string `json:"from"`
	To     string `json:"to"`
	Stream string `json:"stream"`
	// Created is true when this call created the mirror.
	Created bool `json:"created,omitempty"`
	// Messages and LastSeq are the mirror's; OriginLastSeq the origin's.
	Messages      uint64 `json:"messages"`
	LastSeq       uint64 `json:"last_seq"`
	OriginLastSeq uint64 `json:"origin_last_seq"`
	// LagMessages is how many origin events the mirror does not hold yet;
	// LagSeconds the age of the oldest of them (0 when caught up).
	LagMessages uint64  `json:"lag_messages"`
	LagSeconds  float64 `json:"lag_seconds"`
	// Active is how long ago the mirror last heard from its origin.
	Active time.Duration `json:"active"`
	// Error is the mirror's last error as JetStream reports it.
	Error string `json:"error,omitempty"`
}

// locate finds the region holding topic's primary stream (not a mirror).
func (rs Regions) locate(ctx context.Context, topic, hint string) (*Region, *jetstream.StreamInfo, error) {
	for i := range rs {
		r := &rs[i]
		if hint != "" && r.Name != hint {
			continue
		}
		s, err := r.JS.Stream(ctx, platform.StreamName(topic))
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("platform: read topic %s in %s: %w", topic, r.Name, err)
		}
		si := s.CachedInfo()
		if platform.StreamKind(&si.Config) != platform.StreamKindTopic || si.Config.Mirror != nil {
			continue
		}
		return r, si, nil
	}
	where := "any region"
	if hint != "" {
		where = "region " + hint
	}
	return nil, nil, fmt.Errorf("%w: no topic %q in %s", platform.ErrNotFound, topic, where)
}

// Mirror creates (idempotently) the mirror of a topic in region To,
// after checking residency. It returns the mirror's status.
func (rs Regions) Mirror(ctx context.Context, req MirrorRequest) (MirrorStatus, error) {
	from, si, err := rs.locate(ctx, req.Topic, req.From)
	if err != nil {
		return MirrorStatus{}, err
	}
	to := rs.byName(req.To)
	if to == nil {
		return MirrorStatus{}, fmt.Errorf("%w: no region %q (regions: %v)", platform.ErrNotFound, req.To, rs.names())
	}
	if to.Name == from.Name {
		return MirrorStatus{}, fmt.Errorf("%w: topic %s already lives in %s", platform.ErrInvalidSpec, req.Topic, to.Name)
	}
	replicas := req.Replicas
	if replicas == 0 {
		replicas = si.Config.Replicas
	}
	md := maps.Clone(si.Config.Metadata)
	delete(md, "_nats.req.level")
	delete(md, "_nats.ver")
	delete(md, "_nats.level")
	md[mdMirrorOf] = from.Name
	cfg := jetstream.StreamConfig{
		Name:         si.Config.Name,
		Description:  "platform mirror of topic " + req.Topic + " from " + from.Name,
		Mirror:       &jetstream.StreamSource{Name: si.Config.Name, Domain: from.Domain},
		Retention:    si.Config.Retention,
		Storage:      si.Config.Storage,
		Replicas:     replicas,
		MaxAge:       si.Config.MaxAge,
		MaxBytes:     si.Config.MaxBytes,
		Discard:      si.Config.Discard,
		AllowDirect:  true,
		MirrorDirect: false,
		Metadata:     md,
	}
	if err := rs.CheckStream(ctx, to.Name, cfg); err != nil {
		return MirrorStatus{}, err
	}
	created := false
	cur, err := to.JS.Stream(ctx, cfg.Name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		if _, err := to.JS.CreateStream(ctx, cfg); err != nil {
			return MirrorStatus{}, fmt.Errorf("platform: create mirror of %s in %s: %w", req.Topic, to.Name, err)
		}
		created = true
	case err != nil:
		return MirrorStatus{}, fmt.Errorf("platform: read %s in %s: %w", cfg.Name, to.Name, err)
	default:
		c := cur.CachedInfo().Config
		if c.Mirror == nil || c.Mirror.Name != cfg.Mirror.Name || sourceDomain(c.Mirror) != from.Domain {
			return MirrorStatus{}, fmt.Errorf("%w: region %s already has a stream %s that is not a mirror of %s in %s", platform.ErrConflict, to.Name, cfg.Name, req.Topic, from.Name)
		}
	}
	st, err := rs.mirrorStatus(ctx, req.Topic, from, to)
	st.Created = created
	return st, err
}

// MirrorStatus reads the status of topic's mirror in region to.
func (rs Regions) MirrorStatus(ctx context.Context, topic, to string) (MirrorStatus, error) {
	from, _, err := rs.locate(ctx, topic, "")
	if err != nil {
		return MirrorStatus{}, err
	}
	t := rs.byName(to)
	if t == nil {
		return MirrorStatus{}, fmt.Errorf("%w: no region %q", platform.ErrNotFound, to)
	}
	return rs.mirrorStatus(ctx, topic, from, t)
}

func (rs Regions) mirrorStatus(ctx context.Context, topic string, from, to *Region) (MirrorStatus, error) {
	st := MirrorStatus{Topic: topic, From: from.Name, To: to.Name, Stream: platform.StreamName(topic)}
	ms, err := to.JS.Stream(ctx, st.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return st, fmt.Errorf("%w: topic %s has no mirror in %s", platform.ErrNotFound, topic, to.Name)
	}
	if err != nil {
		return st, err
	}
	mi, err := ms.Info(ctx)
	if err != nil {
		return st, err
	}
	st.Messages, st.LastSeq = mi.State.Msgs, mi.State.LastSeq
	if mi.Mirror != nil {
		st.Active = mi.Mirror.Active
		if mi.Mirror.Error != nil {
			st.Error = mi.Mirror.Error.Error()
		}
	}
	ostream, err := from.JS.Stream(ctx, st.Stream)
	if err != nil {
		// The origin is unreachable (its region is down): report what
		// the mirror itself knows.
		if mi.Mirror != nil {
			st.LagMessages = mi.Mirror.Lag
		}
		return st, nil
	}
	oi, err := ostream.Info(ctx)
	if err != nil {
		return st, nil
	}
	st.OriginLastSeq = oi.State.LastSeq
	if oi.State.LastSeq > st.LastSeq {
		first := max(st.LastSeq+1, oi.State.FirstSeq)
		if oi.State.LastSeq >= first {
			st.LagMessages = oi.State.LastSeq - first + 1
		}
		if m, err := ostream.GetMsg(ctx, first); err == nil {
			st.LagSeconds = max(time.Since(m.Time).Seconds(), 0)
		}
	}
	return st, nil
}

// Mirrors lists every platform mirror in every region.
func (rs Regions) Mirrors(ctx context.Context) ([]MirrorStatus, error) {
	var out []MirrorStatus
	for i := range rs {
		to := &rs[i]
		l := to.JS.ListStreams(ctx)
		for si := range l.Info() {
			from := si.Config.Metadata[mdMirrorOf]
			if si.Config.Mirror == nil || from == "" || rs.byName(from) == nil {
				continue
			}
			st, err := rs.mirrorStatus(ctx, platform.ObjectName(&si.Config), rs.byName(from), to)
			if err != nil {
				continue
			}
			out = append(out, st)
		}
		if err := l.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
			return out, err
		}
	}
	return out, nil
}

// MirrorCollector exports platform_mirror_lag_messages and
// platform_mirror_lag_seconds for every mirror, read at scrape time.
type MirrorCollector struct {
	Regions func() Regions
	msgs    *prometheus.Desc
	secs    *prometheus.Desc
}

var _ prometheus.Collector = (*MirrorCollector)(nil)

// NewMirrorCollector returns a collector over the regions regions returns.
func NewMirrorCollector(regions func() Regions) *MirrorCollector {
	l := []string{"topic", "from", "to"}
	return &MirrorCollector{
		Regions: regions,
		msgs:    prometheus.NewDesc("platform_mirror_lag_messages", "Origin events a topic's mirror does not hold yet.", l, nil),
		secs:    prometheus.NewDesc("platform_mirror_lag_seconds", "Age of the oldest origin event a topic's mirror does not hold yet (0: caught up).", l, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *MirrorCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.msgs; ch <- c.secs }

// Collect implements prometheus.Collector.
func (c *MirrorCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ms, _ := c.Regions().Mirrors(ctx)
	for _, m := range ms {
		ch <- prometheus.MustNewConstMetric(c.msgs, prometheus.GaugeValue, float64(m.LagMessages), m.Topic, m.From, m.To)
		ch <- prometheus.MustNewConstMetric(c.secs, prometheus.GaugeValue, m.LagSeconds, m.Topic, m.From, m.To)
	}
}
