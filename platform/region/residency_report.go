package region

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/platform"
)

// Report is `platformctl residency report`: every topic and
// queue of every region, and every other stream that declares a
// residency (a resident KV or object-store bucket), its residency, every
// copy of it (transitively: a copy of a copy is listed too) and every
// violation found.
type Report struct {
	Topics     []TopicResidency `json:"topics"`
	Violations []string         `json:"violations"`
}

// TopicResidency is one topic, queue or resident stream in a
// Report.
type TopicResidency struct {
	// Topic is the topic's or queue's name (a bucket's, a stream's); Kind
	// says which ("topic", "queue", "kv", "object", "stream").
	Topic     string `json:"topic"`
	Kind      string `json:"kind"`
	Residency string `json:"residency,omitempty"`
	// Region is where the topic's (queue's) stream, the primary, lives.
	Region string `json:"region"`
	// Copies are streams in any region that mirror or source the topic
	// (queue) or its DLQ streams, or a copy of them, transitively (each
	// holds its data, so each is resident where the topic is); and the
	// republish destinations of any of them (How "republish", Stream the
	// subject).
	Copies     []Copy   `json:"copies"`
	Violations []string `json:"violations,omitempty"`
}

// Copy is a stream holding copies of another stream's events.
type Copy struct {
	Region string `json:"region"`
	Stream string `json:"stream"`
	// Of is the stream copied (the topic's, one of its DLQ streams, or
	// another copy).
	Of string `json:"of"`
	// How is "mirror", "source" or "republish".
	How string `json:"how"`
}

// streamAt is a stream of a region.
type streamAt struct {
	region string
	cfg    jetstream.StreamConfig
}

// streamKey names a stream of a region.
type streamKey struct{ region, stream string }

// allStreams reads every stream of every region; a region that cannot be
// read is returned as a problem (its copies are unknown).
func (rs Regions) allStreams(ctx context.Context) ([]streamAt, []string) {
	var all []streamAt
	var unread []string
	for _, r := range rs {
		l := r.JS.ListStreams(ctx)
		for si := range l.Info() {
			all = append(all, streamAt{r.Name, si.Config})
		}
		if err := l.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
			unread = append(unread, fmt.Sprintf("region %s could not be read (%v): copies there are unknown", r.Name, err))
		}
	}
	return all, unread
}

// copiesOf returns every stream of all that mirrors or sources a stream
// of derived, or a copy of one, transitively (copies of copies), adding
// each to derived.
func (rs Regions) copiesOf(all []streamAt, derived map[streamKey]bool) []Copy {
	regionOf := map[string]string{}
	for _, r := range rs {
		regionOf[r.Domain] = r.Name
	}
	var out []Copy
	for grew := true; grew; {
		grew = false
		for _, c := range all {
			if derived[streamKey{c.region, c.cfg.Name}] {
				continue
			}
			for _, src := range streamSources(&c.cfg) {
				from := c.region
				if d := sourceDomain(src); d != "" {
					from = regionOf[d]
				}
				if !derived[streamKey{from, src.Name}] {
					continue
				}
				how := "source"
				if src == c.cfg.Mirror {
					how = "mirror"
				}
				out = append(out, Copy{Region: c.region, Stream: c.cfg.Name, Of: src.Name, How: how})
				derived[streamKey{c.region, c.cfg.Name}] = true
				grew = true
				break
			}
		}
	}
	return out
}

// Report reads every stream of every region and reports every topic and
// queue, and every other stream declaring a residency, with its copies
// (followed through copies of copies, in any region) and every residency
// violation: a resident object whose primary is outside its region, a
// copy of it in another region, or a republish of its data on a subject
// the region link carries. A region that cannot be read is itself
// reported as a violation (the report cannot vouch for it).
func (rs Regions) Report(ctx context.Context) (Report, error) {
	rep := Report{Topics: []TopicResidency{}, Violations: []string{}}
	all, unread := rs.allStreams(ctx)
	rep.Violations = append(rep.Violations, unread...)
	for _, s := range all {
		kind := platform.StreamKind(&s.cfg)
		switch {
		case s.cfg.Mirror != nil || s.cfg.Metadata[mdMirrorOf] != "":
			continue
		case kind == platform.StreamKindTopic || kind == platform.StreamKindQueue:
		case kind == "" && s.cfg.Metadata[platform.MetaResidency] != "":
			kind = "stream"
			if strings.HasPrefix(s.cfg.Name, "KV_") {
				kind = "kv"
			} else if strings.HasPrefix(s.cfg.Name, "OBJ_") {
				kind = "object"
			}
		default:
			continue
		}
		name := s.cfg.Name
		switch kind {
		case platform.StreamKindTopic, platform.StreamKindQueue:
			name = platform.ObjectName(&s.cfg)
		case "kv":
			name = strings.TrimPrefix(name, "KV_")
		case "object":
			name = strings.TrimPrefix(name, "OBJ_")
		}
		own, _ := ownResidency(&s.cfg)
		t := TopicResidency{Topic: name, Kind: kind, Residency: own.Residency, Region: s.region, Copies: []Copy{}}
		if t.Residency != "" && t.Residency != s.region {
			t.Violations = append(t.Violations, fmt.Sprintf("%s %s is resident in %s but its stream lives in %s", kind, t.Topic, t.Residency, s.region))
		}
		derived := map[streamKey]bool{{s.region, s.cfg.Name}: true}
		if kind == platform.StreamKindTopic || kind == platform.StreamKindQueue {
			derived[streamKey{s.region, platform.DLQStream(t.Topic)}] = true
			derived[streamKey{s.region, platform.DLQEventsStream(t.Topic)}] = true
		}
		for _, c := range rs.copiesOf(all, derived) {
			t.Copies = append(t.Copies, c)
			if t.Residency != "" && c.Region != t.Residency {
				t.Violations = append(t.Violations, fmt.Sprintf("%s %s is resident in %s but stream %s in %s is a %s of %s", kind, t.Topic, t.Residency, c.Stream, c.Region, c.How, c.Of))
			}
		}
		if t.Residency != "" {
			for _, c := range all {
				if !derived[streamKey{c.region, c.cfg.Name}] || c.cfg.RePublish == nil || c.cfg.RePublish.Destination == "" {
					continue
				}
				dest := c.cfg.RePublish.Destination
				t.Copies = append(t.Copies, Copy{Region: c.region, Stream: dest, Of: c.cfg.Name, How: "republish"})
				covered := append(slices.Clone(own.Covered), c.cfg.Subjects...)
				if !slices.ContainsFunc(covered, func(p string) bool { return subjectWithin(DestinationPattern(dest), p) }) {
					t.Violations = append(t.Violations, fmt.Sprintf("%s %s is resident in %s but stream %s in %s republishes it to %s, outside its resident subjects (the link carries it unless denied)", kind, t.Topic, t.Residency, c.cfg.Name, c.region, dest))
				}
			}
		}
		rep.Violations = append(rep.Violations, t.Violations...)
		rep.Topics = append(rep.Topics, t)
	}
	sort.Slice(rep.Topics, func(i, j int) bool { return rep.Topics[i].Topic < rep.Topics[j].Topic })
	return rep, nil
}
