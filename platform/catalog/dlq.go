package catalog

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/platform"
)

// dlqDuplicateWindow is the Nats-Msg-Id dedupe window of a DLQ stream
// (see platform.DLQStream: an entry is also kept once per subject).
const dlqDuplicateWindow = 10 * time.Minute

// dlqMetadata is the record on a DLQ or advisory stream: its kind, the
// topic or queue it serves and the DLQ's owner.
func dlqMetadata(kind, name string, dlq platform.DLQSpec) map[string]string {
	md := map[string]string{platform.MetaKind: kind, platform.MetaDLQOf: name}
	if dlq.Owner != "" {
		md[platform.MetaOwner] = dlq.Owner
	}
	return md
}

// dlqStreamConfig is the dead-letter stream of a topic or queue (see
// platform.DLQStream).
func dlqStreamConfig(name string, dlq platform.DLQSpec, replicas int) jetstream.StreamConfig {
	c := dlqStreamBase(platform.StreamKindDLQ, name, dlq, replicas)
	c.Name = platform.DLQStream(name)
	c.Description = "platform dead letters of " + name
	c.Subjects = []string{"$DLQ." + platform.StreamName(name) + ".>"}
	c.MaxMsgsPerSubject = 1
	c.Discard = jetstream.DiscardNew
	c.DiscardNewPerSubject = true
	c.Duplicates = dlqDuplicateWindow
	return c
}

// dlqEventsStreamConfig is the advisory capture stream of a topic or
// queue (see platform.DLQEventsStream).
func dlqEventsStreamConfig(name string, dlq platform.DLQSpec, replicas int) jetstream.StreamConfig {
	s := platform.StreamName(name)
	c := dlqStreamBase(platform.StreamKindDLQEvents, name, dlq, replicas)
	c.Name = platform.DLQEventsStream(name)
	c.Description = "platform delivery advisories of " + name
	c.Subjects = []string{
		"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + s + ".*",
		"$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED." + s + ".*",
	}
	c.Discard = jetstream.DiscardOld
	c.Duplicates = platform.DuplicateWindow
	return c
}

// dlqStreamBase holds what both DLQ streams of a topic or queue share: file
// storage, limits retention of dlq.Retention with no byte limit, direct get,
// replicas and the kind's platform metadata.
func dlqStreamBase(kind, name string, dlq platform.DLQSpec, replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
		MaxAge:      dlq.Retention,
		MaxBytes:    -1,
		AllowDirect: true,
		Metadata:    dlqMetadata(kind, name, dlq),
	}
}

// planDLQ adds the creation or update of the DLQ and advisory streams of
// a topic or queue to its plan item: their retention and owner follow
// dlq (the object's platform.DLQSettings), so changing dlq.retention
// in the spec changes the MaxAge of both streams in place.
func (p *plan) planDLQ(ctx context.Context, it *planItem, name string, dlq platform.DLQSpec, replicas int) {
	for _, want := range []jetstream.StreamConfig{dlqStreamConfig(name, dlq, replicas), dlqEventsStreamConfig(name, dlq, replicas)} {
		info, err := p.stream(ctx, want.Name)
		if err != nil {
			p.failRead(err)
			return
		}
		switch {
		case info == nil:
			it.change.Details = append(it.change.Details, fmt.Sprintf("%s: create stream %s (%s, retention %s)", kindOfConfig(want), want.Name, want.Subjects[0], want.MaxAge))
			it.steps = append(it.steps, p.r.createStream(want))
		case platform.StreamKind(&info.Config) != platform.StreamKind(&want):
			p.conflict("dlq."+name, "stream %q exists and is not the platform's %s stream of %s; rename or delete it", want.Name, platform.StreamKind(&want), name)
			continue
		default:
			if d := diffStream(&info.Config, want); len(d) > 0 {
				for _, l := range d {
					it.change.Details = append(it.change.Details, want.Name+": "+l)
				}
				n := mergeStream(&info.Config, want)
				n.MaxMsgsPerSubject, n.DiscardNewPerSubject = want.MaxMsgsPerSubject, want.DiscardNewPerSubject
				it.steps = append(it.steps, p.r.updateStream(n))
			}
		}
		if len(it.steps) > 0 && it.change.Action == "" {
			it.change.Action = ActionUpdate
		}
	}
}

// kindOfConfig is the platform kind a wanted stream config records.
func kindOfConfig(c jetstream.StreamConfig) string { return c.Metadata[platform.MetaKind] }
