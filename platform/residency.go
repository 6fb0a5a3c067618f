package platform

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrResidency: the request would carry a resident topic's events (or
// anything derived from them: its DLQ streams, mirrors, sources) out of its
// region. Nothing was created. The error names the topic, its region and
// the region it would have reached.
var ErrResidency = errors.New("platform: refused by residency policy")

// Region is one region as the platform sees it: its name, its JetStream
// domain and a JetStream context of that domain (each region reached on
// its own connection, never through the link).
type Region struct {
	Name   string
	Domain string
	JS     jetstream.JetStream
}

// Regions are the regions of an installation; the first is home (where
// topics without residency are created).
type Regions []Region

// byName returns region name or nil.
func (rs Regions) byName(name string) *Region {
	for i := range rs {
		if rs[i].Name == name {
			return &rs[i]
		}
	}
	return nil
}

// byDomain returns the region of JetStream domain d ("" is from's own).
func (rs Regions) byDomain(d string, from *Region) *Region {
	if d == "" {
		return from
	}
	for i := range rs {
		if rs[i].Domain == d {
			return &rs[i]
		}
	}
	return nil
}

// mdMirrorOf records, on a mirror stream, the region it mirrors.
const mdMirrorOf = "platform.mirror_of"

// residencyOf returns the residency of a platform stream: a topic's or
// queue's own, or for a DLQ stream that of the topic or queue it belongs to
// (read from its stream in the same region). "" means not resident. The
// second result names the object ("topic orders.eu", "queue jobs.eu").
func residencyOf(ctx context.Context, js jetstream.JetStream, cfg *jetstream.StreamConfig) (string, string, error) {
	switch k := kindOf(cfg); k {
	case kindTopic, kindQueue:
		return cfg.Metadata[mdResidency], k + " " + objectName(cfg), nil
	case kindDLQ, kindDLQEvents:
		of := cfg.Metadata[mdDLQOf]
		s, err := js.Stream(ctx, StreamName(of))
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return "", "topic " + of, nil
		}
		if err != nil {
			return "", "topic " + of, err
		}
		oc := s.CachedInfo().Config
		kind := kindOf(&oc)
		if kind != kindQueue {
			kind = kindTopic
		}
		return oc.Metadata[mdResidency], kind + " " + of, nil
	}
	return "", "stream " + cfg.Name, nil
}

// CheckStream checks a stream configuration about to be created in
// region `in` against the residency policy: every stream it mirrors or
// sources, in whatever domain, must not be (or belong to) a topic resident
// in another region. It returns nil or an error wrapping ErrResidency
// naming every violation. A source in a domain that is no region of the
// installation is refused too: its residency cannot be checked.
func (rs Regions) CheckStream(ctx context.Context, in string, cfg jetstream.StreamConfig) error {
	vs, unknown, err := rs.residencyViolations(ctx, in, cfg)
	if err != nil {
		return err
	}
	problems := append([]string(nil), unknown...)
	for _, v := range vs {
		problems = append(problems, v.Problem)
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrResidency, strings.Join(problems, "; "))
	}
	return nil
}

// sourceViolation is one mirror or source of a stream that would carry a
// resident topic's events out of its region.
type sourceViolation struct {
	Source  *jetstream.StreamSource
	Mirror  bool
	Topic   string // the resident topic or queue ("topic orders.eu", "queue jobs.eu")
	Problem string // the refusal, naming topic or queue, residency and regions
}

// residencyViolations returns the mirror and sources of cfg (a stream in
// region `in`) that read a stream of a topic resident in another region,
// and separately the sources in domains that are no region of the
// installation (unknown: their residency cannot be checked). A source
// stream that does not exist is no violation (nothing to carry yet).
func (rs Regions) residencyViolations(ctx context.Context, in string, cfg jetstream.StreamConfig) ([]sourceViolation, []string, error) {
	at := rs.byName(in)
	if at == nil {
		return nil, nil, fmt.Errorf("%w: no region %q (regions: %s)", ErrNotFound, in, strings.Join(rs.names(), ", "))
	}
	var srcs []*jetstream.StreamSource
	if cfg.Mirror != nil {
		srcs = append(srcs, cfg.Mirror)
	}
	srcs = append(srcs, cfg.Sources...)
	var out []sourceViolation
	var unknown []string
	for _, src := range srcs {
		d := sourceDomain(src)
		from := rs.byDomain(d, at)
		if from == nil {
			unknown = append(unknown, fmt.Sprintf("stream %s in domain %q: not a region of this installation; refused (cannot check its residency)", src.Name, d))
			continue
		}
		s, err := from.JS.Stream(ctx, src.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue // nothing to carry; a later create is checked then
		}
		if err != nil {
			return nil, nil, fmt.Errorf("platform: residency check of %s in %s: %w", src.Name, from.Name, err)
		}
		scfg := s.CachedInfo().Config
		res, topic, err := residencyOf(ctx, from.JS, &scfg)
		if err != nil {
			return nil, nil, fmt.Errorf("platform: residency check of %s in %s: %w", src.Name, from.Name, err)
		}
		if res != "" && res != in {
			what := "a mirror"
			if src != cfg.Mirror {
				what = "a source"
			}
			out = append(out, sourceViolation{Source: src, Mirror: src == cfg.Mirror, Topic: topic,
				Problem: fmt.Sprintf("%s is resident in %s: %s of stream %s (region %s) in region %s would carry its events out of %s",
					topic, res, what, src.Name, from.Name, in, res)})
		}
	}
	return out, unknown, nil
}

// sourceDomain is the JetStream domain a mirror or source reads from ("":
// the stream's own). The server stores Domain as External.APIPrefix
// $JS.<domain>.API.
func sourceDomain(src *jetstream.StreamSource) string {
	if src.Domain != "" {
		return src.Domain
	}
	if src.External != nil {
		return strings.TrimSuffix(strings.TrimPrefix(src.External.APIPrefix, "$JS."), ".API")
	}
	return ""
}

func (rs Regions) names() []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Name
	}
	return out
}

// ResidencyReport is `platformctl residency report`: every topic and
// queue of every region, its residency, every copy of it and every
// violation found.
type ResidencyReport struct {
	Topics     []TopicResidency `json:"topics"`
	Violations []string         `json:"violations"`
}

// TopicResidency is one topic or queue in a ResidencyReport.
type TopicResidency struct {
	// Topic is the topic's or queue's name; Kind says which ("topic" or
	// "queue").
	Topic     string `json:"topic"`
	Kind      string `json:"kind"`
	Residency string `json:"residency,omitempty"`
	// Region is where the topic's (queue's) stream, the primary, lives.
	Region string `json:"region"`
	// Copies are streams in any region that mirror or source the topic
	// (queue) or its DLQ streams.
	Copies     []Copy   `json:"copies"`
	Violations []string `json:"violations,omitempty"`
}

// Copy is a stream holding copies of another stream's events.
type Copy struct {
	Region string `json:"region"`
	Stream string `json:"stream"`
	// Of is the stream copied (the topic's or one of its DLQ streams).
	Of string `json:"of"`
	// How is "mirror" or "source".
	How string `json:"how"`
}

// Report reads every stream of every region and reports every topic and
// queue, its copies and every residency violation: a resident topic or
// queue whose primary is outside its region, or a copy of it (or of its
// DLQ streams) in another region. A region that cannot be read is itself reported as a violation
// (the report cannot vouch for it).
func (rs Regions) Report(ctx context.Context) (ResidencyReport, error) {
	type streamAt struct {
		region string
		cfg    jetstream.StreamConfig
	}
	var all []streamAt
	rep := ResidencyReport{Topics: []TopicResidency{}, Violations: []string{}}
	for _, r := range rs {
		l := r.JS.ListStreams(ctx)
		for si := range l.Info() {
			all = append(all, streamAt{r.Name, si.Config})
		}
		if err := l.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
			rep.Violations = append(rep.Violations, fmt.Sprintf("region %s could not be read (%v): copies there are unknown", r.Name, err))
		}
	}
	domainOf := map[string]string{}
	for _, r := range rs {
		domainOf[r.Name] = r.Domain
	}
	for _, s := range all {
		kind := kindOf(&s.cfg)
		if (kind != kindTopic && kind != kindQueue) || s.cfg.Mirror != nil || s.cfg.Metadata[mdMirrorOf] != "" {
			continue
		}
		t := TopicResidency{Topic: objectName(&s.cfg), Kind: kind, Residency: s.cfg.Metadata[mdResidency], Region: s.region, Copies: []Copy{}}
		if t.Residency != "" && t.Residency != s.region {
			t.Violations = append(t.Violations, fmt.Sprintf("%s %s is resident in %s but its stream lives in %s", kind, t.Topic, t.Residency, s.region))
		}
		derived := map[string]bool{s.cfg.Name: true, DLQStream(t.Topic): true, DLQEventsStream(t.Topic): true}
		for _, c := range all {
			var srcs []*jetstream.StreamSource
			if c.cfg.Mirror != nil {
				srcs = append(srcs, c.cfg.Mirror)
			}
			srcs = append(srcs, c.cfg.Sources...)
			for _, src := range srcs {
				d := sourceDomain(src)
				if d == "" {
					d = domainOf[c.region]
				}
				if !derived[src.Name] || d != domainOf[s.region] {
					continue
				}
				how := "source"
				if src == c.cfg.Mirror {
					how = "mirror"
				}
				t.Copies = append(t.Copies, Copy{Region: c.region, Stream: c.cfg.Name, Of: src.Name, How: how})
				if t.Residency != "" && c.region != t.Residency {
					t.Violations = append(t.Violations, fmt.Sprintf("%s %s is resident in %s but stream %s in %s is a %s of %s", kind, t.Topic, t.Residency, c.cfg.Name, c.region, how, src.Name))
				}
			}
		}
		rep.Violations = append(rep.Violations, t.Violations...)
		rep.Topics = append(rep.Topics, t)
	}
	sort.Slice(rep.Topics, func(i, j int) bool { return rep.Topics[i].Topic < rep.Topics[j].Topic })
	return rep, nil
}

// LinkDeny returns the subjects that must never cross a region link for
// the resident topics among topics: each one's core subjects (<name>.>),
// its dead letters ($DLQ.<stream>.>), and the JetStream API calls that
// read a stream's events or attach a consumer to it (mirror, source,
// direct get, message get) for the topic's stream and its DLQ streams, in
// every domain. Stream metadata (STREAM.INFO, STREAM.LIST) still crosses:
// it names a stream, not its events, and the residency report needs it.
func LinkDeny(topics []TopicSpec) []string {
	var out []string
	for _, t := range topics {
		if t.Residency != "" {
			out = append(out, ResidentDeny(t.Name)...)
		}
	}
	return out
}

// QueueLinkDeny is LinkDeny for the resident queues among queues: a
// queue's subjects (<name>.>), its dead letters and the API calls that
// read its stream and DLQ streams.
func QueueLinkDeny(queues []QueueSpec) []string {
	var out []string
	for _, q := range queues {
		if q.Residency != "" {
			out = append(out, ResidentDeny(q.Name)...)
		}
	}
	return out
}

// CatalogLinkDeny is LinkDeny of the catalog's resident topics and
// QueueLinkDeny of its resident queues, in name order.
func CatalogLinkDeny(c Catalog) []string {
	var ts []TopicSpec
	for _, k := range sortedKeys(c.Topics) {
		ts = append(ts, c.Topics[k])
	}
	var qs []QueueSpec
	for _, k := range sortedKeys(c.Queues) {
		qs = append(qs, c.Queues[k])
	}
	return append(LinkDeny(ts), QueueLinkDeny(qs)...)
}

// ResidentLinkDeny reads every stream of js's domain and returns the link
// deny subjects of the resident topics and queues it holds (their
// platform.residency metadata), sorted by name, and their names. It is
// how a platformd learns the residency of objects it did not declare
// itself: applied through another node's control API, or living in
// another region (read on that region's connection).
func ResidentLinkDeny(ctx context.Context, js jetstream.JetStream) ([]string, []string, error) {
	var names []string
	l := js.ListStreams(ctx)
	for si := range l.Info() {
		c := si.Config
		if k := kindOf(&c); (k == kindTopic || k == kindQueue) && c.Metadata[mdResidency] != "" {
			names = append(names, objectName(&c))
		}
	}
	if err := l.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return nil, nil, fmt.Errorf("platform: list streams for the link deny list: %w", err)
	}
	sort.Strings(names)
	var out []string
	for _, n := range names {
		out = append(out, ResidentDeny(n)...)
	}
	return out, names, nil
}

// ResidentDeny is the link deny list of one resident topic or queue (see
// LinkDeny).
func ResidentDeny(name string) []string {
	s := StreamName(name)
	out := []string{name + ".>", "$DLQ." + s + ".>"}
	for _, stream := range []string{s, DLQStream(name), DLQEventsStream(name)} {
		for _, api := range []string{
			"CONSUMER.CREATE." + stream,
			"CONSUMER.CREATE." + stream + ".>",
			"CONSUMER.DURABLE.CREATE." + stream + ".>",
			"DIRECT.GET." + stream,
			"DIRECT.GET." + stream + ".>",
			"STREAM.MSG.GET." + stream,
		} {
			out = append(out, "$JS.*.API."+api, "$JS.API."+api)
		}
	}
	return out
}

// MergeDeny is the union of deny lists in order, each subject once.
func MergeDeny(lists ...[]string) []string {
	seen := map[string]bool{}
	out := []string{}
	for _, l := range lists {
		for _, s := range l {
			if !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
	}
	return out
}
