package redrive

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/platform/region"
)

// Residency of redrives and replays: resident events (a topic's or
// queue's platform.residency, or a copy of them, see
// region.StreamResidency) never leave their region through a redrive
// or a replay.
//
//   - A redrive of a resident DLQ is refused unless its destination's
//     stream is resident in the same region: a non-resident destination
//     may be mirrored or sourced to another region, so the redriven
//     events could leave through it.
//   - A replay (group reset) of a resident topic is refused when one of
//     the group's consumers delivers on a subject (a push consumer) the
//     region link carries; pulls from another region are denied on the
//     link (region.StreamDeny).
//
// Both refusals wrap ErrInvalid and region.ErrResidency and name the
// object, its region and the destination.

// checkRedriveResidency refuses a redrive of the entries of DLQ stream
// dlq into destination stream dest (see the file comment).
func checkRedriveResidency(ctx context.Context, js jetstream.JetStream, dlq, dest string) error {
	res, what, err := region.StreamResidency(ctx, js, dlq)
	if err != nil {
		return fmt.Errorf("redrive: residency of DLQ %s: %w", dlq, err)
	}
	if res == "" {
		return nil
	}
	dres, dwhat, err := region.StreamResidency(ctx, js, dest)
	if err != nil {
		return fmt.Errorf("redrive: residency of destination stream %s: %w", dest, err)
	}
	if dres == res {
		return nil
	}
	where := "not resident (it may be mirrored or sourced to another region)"
	if dres != "" {
		where = "resident in " + dres
	}
	return fmt.Errorf("%w: %w: the dead letters of %s are resident in %s and may be redriven only into a stream resident in %s; destination stream %s (%s) is %s",
		ErrInvalid, region.ErrResidency, what, res, res, dest, dwhat, where)
}

// replayGroupMetadata is the consumer metadata naming a consumer's group
// (the platform's platform.group).
const replayGroupMetadata = "platform.group"

// checkReplayResidency refuses a replay (group reset) of req.Group on a
// resident topic when one of the group's consumers pushes its deliveries
// on a subject outside the topic's resident subjects (see the file
// comment).
func checkReplayResidency(ctx context.Context, js jetstream.JetStream, req catalog.GroupResetRequest) error {
	var streams []string
	if req.Topic != "" {
		streams = []string{platform.StreamName(req.Topic)}
	} else {
		l := js.StreamNames(ctx)
		for n := range l.Name() {
			streams = append(streams, n)
		}
		if err := l.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
			return fmt.Errorf("redrive: residency of group %s: %w", req.Group, err)
		}
	}
	for _, stream := range streams {
		s, err := js.Stream(ctx, stream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("redrive: residency of group %s: %w", req.Group, err)
		}
		md := s.CachedInfo().Config.Metadata
		res := md["platform.residency"]
		if res == "" {
			continue
		}
		topic := md["platform.name"]
		l := s.ListConsumers(ctx)
		for ci := range l.Info() {
			c := ci.Config
			if c.Metadata[replayGroupMetadata] != req.Group || c.DeliverSubject == "" {
				continue
			}
			if strings.HasPrefix(c.DeliverSubject, topic+".") {
				continue // on the topic's own subjects, which the link denies
			}
			return fmt.Errorf("%w: %w: topic %s is resident in %s: group %s's consumer %s delivers on %s, a subject the region link carries; a replay would send its events there",
				ErrInvalid, region.ErrResidency, topic, res, req.Group, c.Name, c.DeliverSubject)
		}
		if err := l.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
			return fmt.Errorf("redrive: residency of group %s: %w", req.Group, err)
		}
	}
	return nil
}
