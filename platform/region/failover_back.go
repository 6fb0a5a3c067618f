package region

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/jsscan"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
)

// Failback reverses a failover once the original region answers again,
// in this order, so that no event is ever held only by a stream about to
// be deleted:
//
//  1. The promoted stream (region From) stops taking writes: its subjects
//     move to an inert subject. Producers still writing in From reach the
//     origin's stream over the region link (same subjects).
//  2. Reconcile: the origin's events after the promotion point are read
//     (their event ids, Nats-Msg-Id); every event From holds after that
//     point whose id the origin lacks is republished into the origin with
//     the same id, subject and headers, in From's order. An id already
//     there is skipped (deduplicated by event id, not by the stream's
//     2-minute window). Events the origin kept that never reached From
//     (the mirror's lag at failover) stay.
//  3. Every group's position in From is translated to the origin: up to
//     the promotion point sequences are the same; after it, to the
//     origin's sequence of the first event the group had not acknowledged
//     (an event the group may have processed is replayed, never skipped).
//  4. The stream in From is deleted and recreated as a fresh mirror of the
//     origin (an existing mirror cannot be re-pointed, and an old mirror
//     ignores a recreated origin): the origin is primary again and
//     mirroring resumes from sequence 1.

// FailbackRequest asks for topic, failed over to another region, to go
// back to the region it failed over from.
type FailbackRequest struct {
	Topic string `json:"topic"`
	// From is the region currently primary ("": found).
	From string `json:"from,omitempty"`
}

// Failback is the report of a failback.
type Failback struct {
	Topic string `json:"topic"`
	// From is the region that was primary during the outage, To the
	// original region, primary again.
	From          string `json:"from"`
	To            string `json:"to"`
	PromotedAtSeq uint64 `json:"promoted_at_seq"`
	// Scanned: events From held after the promotion point; Copied of them
	// republished into To; Deduplicated already there by event id.
	Scanned      uint64 `json:"scanned"`
	Copied       uint64 `json:"copied"`
	Deduplicated uint64 `json:"deduplicated"`
	// OriginOnly: events To holds after the promotion point that From
	// never had (the mirror's lag at failover); kept.
	OriginOnly uint64          `json:"origin_only"`
	Groups     []FailbackGroup `json:"groups"`
	Mirror     MirrorStatus    `json:"mirror"`
	Notes      []string        `json:"notes,omitempty"`
}

// FailbackGroup is one group's position moved back to the original region.
type FailbackGroup struct {
	Group     string `json:"group"`
	Partition int    `json:"partition"`
	// FromAckFloor is the group's ack floor in From; StartSeq the first
	// sequence it gets in To; ToProcess the events from there on.
	FromAckFloor uint64 `json:"from_ack_floor"`
	StartSeq     uint64 `json:"start_seq"`
	ToProcess    uint64 `json:"to_process"`
}

// scanned is one stored event read during failback.
type scanned struct {
	seq       uint64
	partition int
	id        string
	msg       *jetstream.RawStreamMsg
}

// scanStream reads stream's events from seq first to last in order
// (internal/jsscan; headers only when headersOnly).
func scanStream(ctx context.Context, js jetstream.JetStream, stream string, first, last uint64, headersOnly bool, fn func(scanned) error) error {
	if first > last || last == 0 {
		return nil
	}
	var ferr error
	err := jsscan.Range(ctx, js, stream, first, jsscan.Options{To: last, HeadersOnly: headersOnly}, func(m *jetstream.RawStreamMsg) bool {
		s := scanned{seq: m.Sequence, id: m.Header.Get(jetstream.MsgIDHeader), msg: m, partition: -1}
		if parts := strings.Split(m.Subject, "."); len(parts) >= 2 {
			if p, err := strconv.Atoi(parts[len(parts)-2]); err == nil {
				s.partition = p
			}
		}
		ferr = fn(s)
		return ferr == nil
	})
	if err != nil {
		return fmt.Errorf("platform: %w", err)
	}
	return ferr
}

// Failback moves topic back to the region it failed over from (see the
// comment above). The original region must answer.
func (rs Regions) Failback(ctx context.Context, req FailbackRequest) (Failback, error) {
	out := Failback{Topic: req.Topic, Groups: []FailbackGroup{}}
	stream := platform.StreamName(req.Topic)
	var from *Region
	var fi *jetstream.StreamInfo
	for i := range rs {
		r := &rs[i]
		if req.From != "" && r.Name != req.From {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		s, err := r.JS.Stream(cctx, stream)
		cancel()
		if err != nil {
			continue
		}
		if c := s.CachedInfo().Config; c.Mirror == nil && c.Metadata[mdFailedOverFrom] != "" {
			from, fi = r, s.CachedInfo()
			break
		}
	}
	if from == nil {
		return out, fmt.Errorf("%w: topic %s has not failed over (no promoted stream found)", platform.ErrNotFound, req.Topic)
	}
	to := rs.byName(fi.Config.Metadata[mdFailedOverFrom])
	if to == nil {
		return out, fmt.Errorf("%w: topic %s failed over from %q, not a region of this installation", platform.ErrConflict, req.Topic, fi.Config.Metadata[mdFailedOverFrom])
	}
	out.From, out.To = from.Name, to.Name
	out.PromotedAtSeq, _ = strconv.ParseUint(fi.Config.Metadata[mdPromotedAtSeq], 10, 64)
	spec, err := platform.TopicFromStream(&fi.Config)
	if err != nil {
		return out, err
	}

	// The original region must answer; a lost stream there is recreated
	// (everything is then copied back).
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	os, err := to.JS.Stream(cctx, stream)
	cancel()
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		cfg := platform.TopicStreamConfig(spec)
		cfg.Replicas = fi.Config.Replicas
		if os, err = to.JS.CreateStream(ctx, cfg); err != nil {
			return out, fmt.Errorf("platform: recreate topic %s in %s: %w", req.Topic, to.Name, err)
		}
		out.Notes = append(out.Notes, fmt.Sprintf("%s had no stream %s: recreated, every event copied back", to.Name, stream))
	} else if err != nil {
		return out, fmt.Errorf("%w: region %s does not answer (%v): failback needs the original region back", ErrUnavailable, to.Name, err)
	}

	// 1. No more writes land in From.
	if len(fi.Config.Subjects) != 1 || !strings.HasPrefix(fi.Config.Subjects[0], "$PLATFORM.FAILBACK.") {
		c := fi.Config
		c.Subjects = []string{"$PLATFORM.FAILBACK." + stream}
		c.SubjectTransform = nil
		s, err := from.JS.UpdateStream(ctx, c)
		if err != nil {
			return out, fmt.Errorf("platform: stop writes to %s in %s: %w", stream, from.Name, err)
		}
		fi = s.CachedInfo()
	}
	if i, err := from.JS.Stream(ctx, stream); err == nil {
		if in, err := i.Info(ctx); err == nil {
			fi = in
		}
	}
	oi, err := os.Info(ctx)
	if err != nil {
		return out, err
	}
	base := min(out.PromotedAtSeq, oi.State.LastSeq)

	// 2. Reconcile by event id.
	type loc struct {
		seq       uint64
		partition int
	}
	inOrigin := map[string]loc{}
	var originAfter []scanned
	if err := scanStream(ctx, to.JS, stream, base+1, oi.State.LastSeq, true, func(s scanned) error {
		if s.id != "" {
			inOrigin[s.id] = loc{s.seq, s.partition}
		}
		s.msg = nil
		originAfter = append(originAfter, s)
		return nil
	}); err != nil {
		return out, err
	}
	fromToOrigin := map[uint64]loc{} // From seq -> origin seq
	seenIDs := map[string]bool{}
	if err := scanStream(ctx, from.JS, stream, base+1, fi.State.LastSeq, false, func(s scanned) error {
		out.Scanned++
		id := s.id
		if id == "" {
			id = fmt.Sprintf("failback.%s.%s.%d", req.Topic, from.Name, s.seq)
		}
		seenIDs[id] = true
		if l, ok := inOrigin[id]; ok {
			out.Deduplicated++
			fromToOrigin[s.seq] = l
			return nil
		}
		parts := strings.Split(s.msg.Subject, ".")
		m := nats.NewMsg(req.Topic + "." + parts[len(parts)-1])
		for k, v := range s.msg.Header {
			if strings.HasPrefix(k, "Nats-Expected") {
				continue
			}
			m.Header[k] = v
		}
		m.Header.Set(jetstream.MsgIDHeader, id)
		m.Data = s.msg.Data
		var ack *jetstream.PubAck
		err := catalog.NewReconciler(to.JS, catalog.ReconcilerOptions{}).Retry(ctx, "copy back event "+id, func(ctx context.Context) error {
			var err error
			ack, err = to.JS.PublishMsg(ctx, m, jetstream.WithExpectStream(stream))
			return err
		})
		if err != nil {
			return fmt.Errorf("platform: copy event %s back to %s: %w", id, to.Name, err)
		}
		if ack.Duplicate {
			out.Deduplicated++
		} else {
			out.Copied++
		}
		fromToOrigin[s.seq] = loc{ack.Sequence, s.partition}
		inOrigin[id] = loc{ack.Sequence, s.partition}
		return nil
	}); err != nil {
		return out, fmt.Errorf("%w (nothing was deleted; run the failback again)", err)
	}
	for _, s := range originAfter {
		if s.id == "" || !seenIDs[s.id] {
			out.OriginOnly++
		}
	}

	// 3. Translate every group's position in From.
	fs, err := from.JS.Stream(ctx, stream)
	if err != nil {
		return out, err
	}
	type move struct {
		group     string
		partition int
		ackFloor  uint64
		start     uint64
	}
	var moves []move
	l := fs.ListConsumers(ctx)
	for ci := range l.Info() {
		g := ci.Config.Metadata[platform.MetaGroup]
		p, err := strconv.Atoi(ci.Config.Metadata[platform.MetaPartition])
		if g == "" || err != nil {
			continue
		}
		a := ci.AckFloor.Stream
		mv := move{group: g, partition: p, ackFloor: a}
		if a < base {
			mv.start = a + 1
		} else {
			// The first origin event of the partition the group may not
			// have processed: copies of From's unacknowledged events, or
			// events From never had.
			mv.start = 0
			for fseq, l := range fromToOrigin {
				if fseq > a && (l.partition == p || l.partition < 0) && (mv.start == 0 || l.seq < mv.start) {
					mv.start = l.seq
				}
			}
			for _, s := range originAfter {
				if (s.id == "" || !seenIDs[s.id]) && (s.partition == p || s.partition < 0) && (mv.start == 0 || s.seq < mv.start) {
					mv.start = s.seq
				}
			}
			if mv.start == 0 {
				mv.start = max(base+1, lastOf(ctx, os)+1)
			}
		}
		moves = append(moves, mv)
	}
	if err := l.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return out, err
	}
	rec := catalog.NewReconciler(to.JS, catalog.ReconcilerOptions{RetryFor: 10 * time.Second})
	for _, mv := range moves {
		name := platform.PartitionConsumer(mv.group, mv.partition)
		want := platform.GroupConsumerConfig(platform.GroupSpec{Name: mv.group, Topic: req.Topic}, mv.partition)
		fg := FailbackGroup{Group: mv.group, Partition: mv.partition, FromAckFloor: mv.ackFloor, StartSeq: mv.start}
		err := rec.Retry(ctx, "move consumer "+name, func(ctx context.Context) error {
			if _, err := to.JS.Consumer(ctx, stream, name); errors.Is(err, jetstream.ErrConsumerNotFound) {
				if _, err := to.JS.CreateConsumer(ctx, stream, want); err != nil {
					return err
				}
			} else if err != nil {
				return err
			}
			if _, err := to.JS.ResetConsumerToSequence(ctx, stream, name, mv.start); err != nil {
				return err
			}
			c, err := to.JS.Consumer(ctx, stream, name)
			if err != nil {
				return err
			}
			fg.ToProcess = c.CachedInfo().NumPending
			return nil
		})
		if err != nil {
			return out, fmt.Errorf("platform: move group %s back to %s: %w (every event is in %s; run the failback again)", mv.group, to.Name, err, to.Name)
		}
		out.Groups = append(out.Groups, fg)
	}

	// 4. The origin is primary again; From becomes a fresh mirror.
	if err := from.JS.DeleteStream(ctx, stream); err != nil {
		return out, fmt.Errorf("platform: delete %s in %s (every event is in %s; run the failback again): %w", stream, from.Name, to.Name, err)
	}
	// The region that just came back may still be electing leaders: a
	// request that times out is tried again.
	var st MirrorStatus
	err = catalog.NewReconciler(from.JS, catalog.ReconcilerOptions{RetryFor: 30 * time.Second, AttemptTimeout: 10 * time.Second}).Retry(ctx, "mirror "+req.Topic+" in "+from.Name, func(ctx context.Context) error {
		var err error
		st, err = rs.Mirror(ctx, MirrorRequest{Topic: req.Topic, From: to.Name, To: from.Name, Replicas: fi.Config.Replicas})
		return err
	})
	if err != nil {
		return out, fmt.Errorf("platform: %s is primary again but its mirror in %s could not be created (run `platformctl region mirror %s --to %s`): %w", to.Name, from.Name, req.Topic, from.Name, err)
	}
	out.Mirror = st
	return out, nil
}

func lastOf(ctx context.Context, s jetstream.Stream) uint64 {
	if i, err := s.Info(ctx); err == nil {
		return i.State.LastSeq
	}
	return 0
}
