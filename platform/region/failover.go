package region

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/kvutil"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
)

// Failover and failback of a mirrored topic between regions.
//
// Failover (Regions.Failover) promotes the mirror of a topic in region To
// into the topic's primary (its Mirror removed, nats-server 2.12+) and
// reports how far the mirror was behind. Mirrors keep the origin's
// sequence numbers, so each group's position translates exactly: from the
// origin's consumers, else from RecordPositions' records in
// platform_group_positions, else from the group's last known ack time. The
// report states the duplicate window each group must absorb (inbox dedupe
// by event id).
//
// Resident topics cannot fail over (no copy exists): Failover refuses with
// ErrResidency; producers keep writing to their outbox until the home
// region answers. Failback (Regions.Failback) reverses a failover; see
// failover_back.go.
//
// Invariants: nothing is deleted before its events exist in the region
// that keeps them; a failback interrupted before its last step can be run
// again and finishes. Details: docs/design/region-failover.md.

// ErrUnavailable: the region the operation needs does not answer; nothing
// was changed. Retry when it is back.
var ErrUnavailable = errors.New("platform: region unavailable")

// Stream metadata a failover leaves on the promoted stream (read by
// Failback).
const (
	mdFailedOverFrom = "platform.failed_over_from"
	mdPromotedAtSeq  = "platform.promoted_at_seq"
	mdPromotedAt     = "platform.promoted_at"
)

// PositionsBucket is the KV bucket, in each region holding mirrors, where
// RecordPositions keeps the origin's consumer group positions.
const PositionsBucket = "platform_group_positions"

// DegradeMode is the documented alternative offered when a resident topic
// is asked to fail over.
const DegradeMode = "degrade mode: the topic stays in its home region; while that region is down producers keep writing to their transactional outbox (outboxrelay), which holds the events and retries until the home region returns, and consumers resume from their positions there; nothing is lost, delivery is late by the outage"

// FailoverRequest asks for topic's mirror in region To to become the
// topic's primary.
type FailoverRequest struct {
	Topic string `json:"topic"`
	To    string `json:"to"`
	// Groups are consumer groups to recreate even when no position of
	// them was recorded (they start from the time fallback).
	Groups []string `json:"groups,omitempty"`
	// CatchUp bounds the wait for the mirror to reach the origin's last
	// sequence when the origin answers (0: 10s; negative: do not wait).
	CatchUp time.Duration `json:"catch_up,omitempty"`
	// DryRun reports and changes nothing.
	DryRun bool `json:"dry_run,omitempty"`
}

// Failover is the report of a failover.
type Failover struct {
	Topic  string `json:"topic"`
	From   string `json:"from"`
	To     string `json:"to"`
	DryRun bool   `json:"dry_run,omitempty"`
	// OriginReachable is whether the origin answered; OriginError why not.
	OriginReachable bool   `json:"origin_reachable"`
	OriginError     string `json:"origin_error,omitempty"`
	// LastOriginSeq is the origin's last sequence as last seen (from the
	// origin itself, or the mirror's last report of it).
	LastOriginSeq uint64 `json:"last_origin_seq"`
	// MirrorLastSeq is the mirror's last sequence at promotion.
	MirrorLastSeq uint64 `json:"mirror_last_seq"`
	// LagEvents and LagSeconds are how far the mirror was behind when
	// checked: events it lacks and the age of the oldest of them (origin
	// gone: the time since it last heard from the origin).
	LagEvents  uint64  `json:"lag_events"`
	LagSeconds float64 `json:"lag_seconds"`
	// LastContact is how long before the check the mirror last heard from
	// its origin.
	LastContact time.Duration `json:"last_contact"`
	// Unreplicated is the lag left at promotion: events acknowledged in
	// the origin that the new primary does not hold (they stay in the
	// origin; failback keeps them).
	Unreplicated uint64 `json:"unreplicated"`
	// PromotedAtSeq is the new primary's last sequence when promoted: the
	// events after it were written in To.
	PromotedAtSeq uint64          `json:"promoted_at_seq"`
	Groups        []FailoverGroup `json:"groups"`
	// DuplicateWindow sums the groups' duplicate windows.
	DuplicateWindow uint64   `json:"duplicate_window"`
	Notes           []string `json:"notes,omitempty"`
}

// FailoverGroup is one consumer group recreated in the new region.
type FailoverGroup struct {
	Group      string             `json:"group"`
	Partitions []FailoverPosition `json:"partitions"`
	// DuplicateWindow is the events from the new positions to the
	// promotion point, summed over partitions.
	DuplicateWindow uint64 `json:"duplicate_window"`
}

// FailoverPosition is a group's translated position on one partition.
type FailoverPosition struct {
	Partition int    `json:"partition"`
	Consumer  string `json:"consumer"`
	// Source: "origin" (its live ack floor), "recorded" (the last
	// recorded one), "time" (the first event at or after At) or "start".
	Source   string    `json:"source"`
	AckFloor uint64    `json:"ack_floor"`
	At       time.Time `json:"at,omitzero"`
	// StartSeq is the first sequence the group gets in the new region.
	StartSeq uint64 `json:"start_seq"`
	// Duplicates is how many events of the partition lie between StartSeq
	// and the promotion point.
	Duplicates uint64 `json:"duplicates"`
}

// GroupPosition is one origin group consumer's position as recorded in
// PositionsBucket.
type GroupPosition struct {
	Topic     string `json:"topic"`
	Origin    string `json:"origin"`
	Group     string `json:"group"`
	Partition int    `json:"partition"`
	Consumer  string `json:"consumer"`
	AckFloor  uint64 `json:"ack_floor"`
	// AckTime is when the origin last moved the ack floor.
	AckTime       time.Time `json:"ack_time,omitzero"`
	Delivered     uint64    `json:"delivered"`
	OriginLastSeq uint64    `json:"origin_last_seq"`
	RecordedAt    time.Time `json:"recorded_at"`
}

func positionKey(stream, consumer string) string { return stream + "." + consumer }

// RecordPositions writes, for every platform mirror, the positions of the
// origin's consumer groups into PositionsBucket in the mirror's region
// (what Failover uses when the origin is gone). It returns how many
// positions it wrote; an origin that does not answer is skipped (its last
// record stays).
func (rs Regions) RecordPositions(ctx context.Context) (int, error) {
	n := 0
	var errs []error
	for i := range rs {
		to := &rs[i]
		var mirrors []jetstream.StreamConfig
		l := to.JS.ListStreams(ctx)
		for si := range l.Info() {
			if si.Config.Mirror != nil && si.Config.Metadata[mdMirrorOf] != "" && platform.StreamKind(&si.Config) == platform.StreamKindTopic {
				mirrors = append(mirrors, si.Config)
			}
		}
		if err := l.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
			errs = append(errs, fmt.Errorf("platform: list streams of %s: %w", to.Name, err))
			continue
		}
		if len(mirrors) == 0 {
			continue
		}
		kv, err := positionsKV(ctx, to, mirrors[0].Replicas)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, mc := range mirrors {
			from := rs.byName(mc.Metadata[mdMirrorOf])
			if from == nil {
				continue
			}
			pos, _, err := originPositions(ctx, from, platform.ObjectName(&mc))
			if err != nil {
				continue // origin gone: keep the last record
			}
			for _, p := range pos {
				b, _ := json.Marshal(p)
				if _, err := kv.Put(ctx, positionKey(mc.Name, p.Consumer), b); err != nil {
					errs = append(errs, fmt.Errorf("platform: record position %s/%s in %s: %w", mc.Name, p.Consumer, to.Name, err))
					continue
				}
				n++
			}
		}
	}
	return n, errors.Join(errs...)
}

func positionsKV(ctx context.Context, r *Region, replicas int) (jetstream.KeyValue, error) {
	kv, err := kvutil.Open(ctx, r.JS, jetstream.KeyValueConfig{
		Bucket: PositionsBucket, Description: "consumer group positions of mirrored topics' origins (platform failover)",
		History: 1, Replicas: max(replicas, 1),
	})
	if err != nil {
		return nil, fmt.Errorf("platform: positions bucket in %s: %w", r.Name, err)
	}
	return kv, nil
}

// originPositions reads the group consumers of topic's stream in region
// from (and the stream's last sequence).
func originPositions(ctx context.Context, from *Region, topic string) ([]GroupPosition, uint64, error) {
	s, err := from.JS.Stream(ctx, platform.StreamName(topic))
	if err != nil {
		return nil, 0, err
	}
	var out []GroupPosition
	l := s.ListConsumers(ctx)
	now := time.Now().UTC()
	for ci := range l.Info() {
		g := ci.Config.Metadata[platform.MetaGroup]
		p, err := strconv.Atoi(ci.Config.Metadata[platform.MetaPartition])
		if g == "" || err != nil {
			continue
		}
		gp := GroupPosition{Topic: topic, Origin: from.Name, Group: g, Partition: p, Consumer: ci.Name,
			AckFloor: ci.AckFloor.Stream, Delivered: ci.Delivered.Stream, OriginLastSeq: s.CachedInfo().State.LastSeq, RecordedAt: now}
		if ci.AckFloor.Last != nil {
			gp.AckTime = ci.AckFloor.Last.UTC()
		}
		out = append(out, gp)
	}
	if err := l.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return nil, 0, err
	}
	return out, s.CachedInfo().State.LastSeq, nil
}

// recordedPositions reads the positions recorded in region to for topic.
func recordedPositions(ctx context.Context, to *Region, topic string) ([]GroupPosition, error) {
	kv, err := kvutil.Lookup(ctx, to.JS, PositionsBucket)
	if kv == nil || err != nil {
		return nil, err
	}
	keys, err := kvutil.Keys(ctx, kv, positionKey(platform.StreamName(topic), ">"))
	if err != nil {
		return nil, err
	}
	var out []GroupPosition
	for _, k := range keys {
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue
		}
		var gp GroupPosition
		if json.Unmarshal(e.Value(), &gp) == nil {
			out = append(out, gp)
		}
	}
	return out, nil
}

// residentAnywhere returns the residency of topic as any reachable region
// records it ("" when none does).
func (rs Regions) residentAnywhere(ctx context.Context, topic string) string {
	for _, r := range rs {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		s, err := r.JS.Stream(cctx, platform.StreamName(topic))
		cancel()
		if err == nil {
			if res := s.CachedInfo().Config.Metadata[platform.MetaResidency]; res != "" {
				return res
			}
		}
	}
	return ""
}

// Failover promotes topic's mirror in region req.To to the topic's
// primary and recreates its consumer groups there (see the file comment).
// Errors: ErrResidency for a resident topic (the message offers the
// degrade mode), ErrNotFound when To has no mirror of the topic,
// ErrConflict when the topic already lives in To.
func (rs Regions) Failover(ctx context.Context, req FailoverRequest) (Failover, error) {
	out := Failover{Topic: req.Topic, To: req.To, DryRun: req.DryRun, Groups: []FailoverGroup{}}
	if req.Topic == "" || req.To == "" {
		return out, fmt.Errorf("%w: failover needs a topic and a region to fail over to", platform.ErrInvalidSpec)
	}
	to := rs.byName(req.To)
	if to == nil {
		return out, fmt.Errorf("%w: no region %q (regions: %s)", platform.ErrNotFound, req.To, strings.Join(rs.names(), ", "))
	}
	if res := rs.residentAnywhere(ctx, req.Topic); res != "" {
		return out, fmt.Errorf("%w: topic %s is resident in %s and cannot fail over to %s (it has no copy outside %s); use %s", ErrResidency, req.Topic, res, req.To, res, DegradeMode)
	}
	stream := platform.StreamName(req.Topic)
	ms, err := to.JS.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return out, fmt.Errorf("%w: region %s has no mirror of topic %s: nothing to promote (create one ahead of an outage with `platformctl region mirror %s --to %s`; a resident topic has none by design: %s)", platform.ErrNotFound, req.To, req.Topic, req.Topic, req.To, DegradeMode)
	}
	if err != nil {
		return out, fmt.Errorf("platform: read %s in %s: %w", stream, req.To, err)
	}
	mi, err := ms.Info(ctx)
	if err != nil {
		return out, fmt.Errorf("platform: read %s in %s: %w", stream, req.To, err)
	}
	if mi.Config.Mirror == nil {
		if f := mi.Config.Metadata[mdFailedOverFrom]; f != "" {
			return out, fmt.Errorf("%w: topic %s already failed over from %s to %s (at sequence %s); fail back with `platformctl region failback %s`", platform.ErrConflict, req.Topic, f, req.To, mi.Config.Metadata[mdPromotedAtSeq], req.Topic)
		}
		return out, fmt.Errorf("%w: topic %s already lives in %s", platform.ErrConflict, req.Topic, req.To)
	}
	from := rs.byName(mi.Config.Metadata[mdMirrorOf])
	if from == nil {
		return out, fmt.Errorf("%w: stream %s in %s mirrors a region this installation does not know (%q)", platform.ErrConflict, stream, req.To, mi.Config.Metadata[mdMirrorOf])
	}
	out.From = from.Name

	// How far behind: ask the origin, else what the mirror last knew.
	octx, cancel := context.WithTimeout(ctx, 3*time.Second)
	originPos, originLast, oerr := originPositions(octx, from, req.Topic)
	cancel()
	out.OriginReachable = oerr == nil
	if oerr != nil {
		out.OriginError = oerr.Error()
	}
	if mi.Mirror != nil {
		out.LastContact = mi.Mirror.Active
	}
	if out.OriginReachable {
		out.LastOriginSeq = originLast
		st, err := rs.mirrorStatus(ctx, req.Topic, from, to)
		if err == nil {
			out.LagEvents, out.LagSeconds = st.LagMessages, st.LagSeconds
		}
		wait := req.CatchUp
		if wait == 0 {
			wait = 10 * time.Second
		}
		if !req.DryRun && wait > 0 && mi.State.LastSeq < originLast {
			deadline := time.Now().Add(wait)
			for time.Now().Before(deadline) {
				if i, err := ms.Info(ctx); err == nil {
					mi = i
					if mi.State.LastSeq >= originLast {
						break
					}
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		if originLast > mi.State.LastSeq {
			out.Unreplicated = originLast - mi.State.LastSeq
		}
	} else {
		if mi.Mirror != nil {
			out.LagEvents = mi.Mirror.Lag
		}
		out.LastOriginSeq = mi.State.LastSeq + out.LagEvents
		out.LagSeconds = out.LastContact.Seconds()
		out.Unreplicated = out.LagEvents
		out.Notes = append(out.Notes, fmt.Sprintf("origin %s does not answer (%v): lag is the mirror's last report; events it lacks stay in %s and are kept by failback", from.Name, oerr, from.Name))
	}
	out.MirrorLastSeq = mi.State.LastSeq

	// Where each group resumes.
	positions := originPos
	source := "origin"
	if !out.OriginReachable {
		source = "recorded"
		if positions, err = recordedPositions(ctx, to, req.Topic); err != nil {
			out.Notes = append(out.Notes, fmt.Sprintf("recorded positions unreadable (%v): groups start by time", err))
		}
	}
	spec, err := platform.TopicFromStream(&mi.Config)
	if err != nil {
		return out, err
	}
	plan := map[string][]*FailoverPosition{}
	lastAck := map[string]time.Time{}
	for _, gp := range positions {
		if gp.Partition < 0 || gp.Partition >= spec.Partitions {
			continue
		}
		if plan[gp.Group] == nil {
			plan[gp.Group] = make([]*FailoverPosition, spec.Partitions)
		}
		fp := &FailoverPosition{Partition: gp.Partition, Consumer: platform.PartitionConsumer(gp.Group, gp.Partition), Source: source, AckFloor: gp.AckFloor, StartSeq: gp.AckFloor + 1}
		if source == "recorded" {
			fp.At = gp.RecordedAt
		}
		switch {
		case fp.StartSeq < mi.State.FirstSeq:
			fp.StartSeq = mi.State.FirstSeq
		case fp.StartSeq > mi.State.LastSeq+1:
			// The group acknowledged events the mirror never got.
			fp.StartSeq = mi.State.LastSeq + 1
		}
		plan[gp.Group][gp.Partition] = fp
		if gp.AckTime.After(lastAck[gp.Group]) {
			lastAck[gp.Group] = gp.AckTime
		}
	}
	for _, g := range req.Groups {
		if plan[g] == nil {
			plan[g] = make([]*FailoverPosition, spec.Partitions)
		}
	}
	rec := catalog.NewReconciler(to.JS, catalog.ReconcilerOptions{RetryFor: 10 * time.Second})
	for g, parts := range plan {
		for p := range parts {
			if parts[p] != nil {
				continue
			}
			at := lastAck[g]
			if at.IsZero() {
				at = time.Now().Add(-out.LastContact - platform.GroupAckWait)
			}
			fp := &FailoverPosition{Partition: p, Consumer: platform.PartitionConsumer(g, p), Source: "time", At: at.UTC()}
			seq, _, found, err := rec.FirstMatching(ctx, stream, platform.PartitionSubject(req.Topic, p), &at)
			switch {
			case err != nil:
				return out, fmt.Errorf("platform: find position of %s by time in %s: %w", fp.Consumer, req.To, err)
			case found:
				fp.StartSeq = seq
			default:
				fp.StartSeq = mi.State.LastSeq + 1
			}
			parts[p] = fp
		}
	}

	if req.DryRun {
		out.PromotedAtSeq = mi.State.LastSeq
		out.Groups = groupsReport(plan)
		out.Notes = append(out.Notes, "dry run: nothing changed; duplicate windows are counted when the groups are created")
		return out, nil
	}

	// Promote: the mirror becomes the topic's stream.
	cfg := platform.TopicStreamConfig(spec)
	cfg.Replicas = mi.Config.Replicas
	md := maps.Clone(mi.Config.Metadata)
	delete(md, mdMirrorOf)
	delete(md, "_nats.req.level")
	delete(md, "_nats.ver")
	delete(md, "_nats.level")
	md[mdFailedOverFrom] = from.Name
	md[mdPromotedAtSeq] = strconv.FormatUint(mi.State.LastSeq, 10)
	md[mdPromotedAt] = time.Now().UTC().Format(time.RFC3339Nano)
	cfg.Metadata = md
	cfg.Description = mi.Config.Description + " (promoted: failed over from " + from.Name + ")"
	ps, err := to.JS.UpdateStream(ctx, cfg)
	if err != nil {
		return out, fmt.Errorf("platform: promote the mirror of %s in %s: %w", req.Topic, req.To, err)
	}
	out.PromotedAtSeq = ps.CachedInfo().State.LastSeq

	// Recreate the groups at the translated positions.
	for g, parts := range plan {
		for _, fp := range parts {
			want := platform.GroupConsumerConfig(platform.GroupSpec{Name: g, Topic: req.Topic}, fp.Partition)
			err := rec.Retry(ctx, "create consumer "+fp.Consumer, func(ctx context.Context) error {
				if _, err := to.JS.CreateOrUpdateConsumer(ctx, stream, want); err != nil {
					return err
				}
				_, err := to.JS.ResetConsumerToSequence(ctx, stream, fp.Consumer, fp.StartSeq)
				if err != nil {
					return err
				}
				c, err := to.JS.Consumer(ctx, stream, fp.Consumer)
				if err != nil {
					return err
				}
				fp.Duplicates = c.CachedInfo().NumPending
				return nil
			})
			if err != nil {
				return out, fmt.Errorf("platform: recreate group %s in %s: %w (the topic is promoted; finish the groups with `platformctl group apply` and `platformctl group reset`, positions in this report)", g, req.To, err)
			}
		}
	}
	out.Groups = groupsReport(plan)
	for _, g := range out.Groups {
		out.DuplicateWindow += g.DuplicateWindow
	}
	return out, nil
}

func groupsReport(plan map[string][]*FailoverPosition) []FailoverGroup {
	out := []FailoverGroup{}
	for _, g := range slices.Sorted(maps.Keys(plan)) {
		fg := FailoverGroup{Group: g}
		for _, fp := range plan[g] {
			fg.Partitions = append(fg.Partitions, *fp)
			fg.DuplicateWindow += fp.Duplicates
		}
		out = append(out, fg)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	return out
}
