package region

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/platform"
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

// resident is the residency of a stream: the region its data must not
// leave ("" not resident), the object it belongs to or copies ("topic
// orders.eu", "kv bucket sessions") and the subjects under which the link
// denies that object's data (where a republish of it may go).
type resident struct {
	Residency string
	What      string
	Covered   []string
}

// maxResidencyDepth bounds how many mirrors or sources deep residency is
// followed (a chain longer than that is refused as unknown, see
// residencyOf).
const maxResidencyDepth = 8

// objectLabel names the object a stream holds: a topic or queue, a KV
// bucket (KV_<bucket>), an object store (OBJ_<bucket>) or a stream.
func objectLabel(cfg *jetstream.StreamConfig) string {
	switch k := platform.StreamKind(cfg); {
	case k == platform.StreamKindTopic || k == platform.StreamKindQueue:
		return k + " " + platform.ObjectName(cfg)
	case strings.HasPrefix(cfg.Name, "KV_"):
		return "kv bucket " + strings.TrimPrefix(cfg.Name, "KV_")
	case strings.HasPrefix(cfg.Name, "OBJ_"):
		return "object store " + strings.TrimPrefix(cfg.Name, "OBJ_")
	}
	return "stream " + cfg.Name
}

// ownResidency is the residency a stream declares itself: its
// platform.residency metadata (a topic, a queue, a KV or object-store
// bucket created with that metadata, any stream), with the subjects the
// link denies for it.
func ownResidency(cfg *jetstream.StreamConfig) (resident, bool) {
	res := cfg.Metadata[platform.MetaResidency]
	if res == "" {
		return resident{}, false
	}
	r := resident{Residency: res, What: objectLabel(cfg), Covered: slices.Clone(cfg.Subjects)}
	if k := platform.StreamKind(cfg); k == platform.StreamKindTopic || k == platform.StreamKindQueue {
		n := platform.ObjectName(cfg)
		r.Covered = append(r.Covered, n+".>", "$DLQ."+platform.StreamName(n)+".>")
	}
	return r, true
}

// residencyOf returns the residency of stream cfg in region at. Residency
// propagates: a stream is resident when it declares it (ownResidency),
// when it is the DLQ stream of a resident topic or queue (read from its
// stream in the same region), or when anything it mirrors or sources, in
// any region, is resident, transitively. A chain deeper than
// maxResidencyDepth is an error (its residency is unknown).
func (rs Regions) residencyOf(ctx context.Context, at *Region, cfg *jetstream.StreamConfig) (resident, error) {
	return rs.residencyAt(ctx, at, cfg, 0)
}

func (rs Regions) residencyAt(ctx context.Context, at *Region, cfg *jetstream.StreamConfig, depth int) (resident, error) {
	if depth > maxResidencyDepth {
		return resident{}, fmt.Errorf("%w: stream %s: mirrors and sources more than %d deep; its residency is not followed further", ErrResidency, cfg.Name, maxResidencyDepth)
	}
	if r, ok := ownResidency(cfg); ok {
		return r, nil
	}
	switch platform.StreamKind(cfg) {
	case platform.StreamKindDLQ, platform.StreamKindDLQEvents:
		of := cfg.Metadata[platform.MetaDLQOf]
		s, err := at.JS.Stream(ctx, platform.StreamName(of))
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return resident{What: "topic " + of}, nil
		}
		if err != nil {
			return resident{What: "topic " + of}, err
		}
		oc := s.CachedInfo().Config
		if r, ok := ownResidency(&oc); ok {
			return r, nil
		}
		return resident{What: objectLabel(&oc)}, nil
	}
	for _, src := range streamSources(cfg) {
		from := rs.byDomain(sourceDomain(src), at)
		if from == nil {
			continue // not a region: refused by CheckStream and the gate
		}
		s, err := from.JS.Stream(ctx, src.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return resident{}, fmt.Errorf("platform: residency of %s in %s: %w", src.Name, from.Name, err)
		}
		scfg := s.CachedInfo().Config
		r, err := rs.residencyAt(ctx, from, &scfg, depth+1)
		if err != nil {
			return resident{}, err
		}
		if r.Residency != "" {
			r.What = propagatedWhat(r.What, cfg.Name)
			return r, nil
		}
	}
	return resident{What: objectLabel(cfg)}, nil
}

// propagatedWhat names resident data read through stream via, a copy of
// it: "topic orders.eu (through stream via)" (the outermost copy).
func propagatedWhat(what, via string) string {
	root, _, _ := strings.Cut(what, " (through ")
	return root + " (through stream " + via + ")"
}

// streamSources is cfg's mirror and sources, the mirror first.
func streamSources(cfg *jetstream.StreamConfig) []*jetstream.StreamSource {
	var srcs []*jetstream.StreamSource
	if cfg.Mirror != nil {
		srcs = append(srcs, cfg.Mirror)
	}
	return append(srcs, cfg.Sources...)
}

// StreamResidency returns the residency of stream in js's domain (see
// residencyOf; sources in other domains are not followed): the region,
// and the object named. "" is not resident.
func StreamResidency(ctx context.Context, js jetstream.JetStream, stream string) (string, string, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return "", "", err
	}
	cfg := s.CachedInfo().Config
	at := &Region{JS: js}
	r, err := Regions{*at}.residencyOf(ctx, at, &cfg)
	return r.Residency, r.What, err
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
// resident topic's events out of its region, or its republish that would
// put them on a subject the region link carries.
type sourceViolation struct {
	Source    *jetstream.StreamSource
	Mirror    bool
	Republish bool
	Topic     string // the resident object ("topic orders.eu", "kv bucket s")
	Problem   string // the refusal, naming the object, residency and regions
}

// residencyViolations returns the mirror and sources of cfg (a stream in
// region `in`) that read resident data of another region (residencyOf:
// a resident topic, queue, bucket or stream, or any copy of one), and
// cfg's republish when cfg holds resident data (its own, or what it
// copies, or the residency of the stream of that name in `in` today) and
// the republish destination lies outside the subjects the link denies for
// that data, and, when cfg will hold resident data, every copy of cfg
// (transitively) outside that data's region: a mirror made abroad before
// cfg held resident data would carry it (the violation's Source is the
// source that makes cfg resident, nil when cfg declares the residency).
// Separately it returns the sources in domains that are no
// region of the installation (unknown: their residency cannot be checked).
// A source stream that does not exist is no violation (nothing to carry
// yet).
func (rs Regions) residencyViolations(ctx context.Context, in string, cfg jetstream.StreamConfig) ([]sourceViolation, []string, error) {
	return rs.residencyViolationsOf(ctx, in, cfg, true)
}

// residencyViolationsOf is residencyViolations; with copies false the
// copies of cfg abroad are not looked for (the guard's start-up sweep:
// there the copy abroad is the violation, refused when it is checked).
func (rs Regions) residencyViolationsOf(ctx context.Context, in string, cfg jetstream.StreamConfig, copies bool) ([]sourceViolation, []string, error) {
	at := rs.byName(in)
	if at == nil {
		return nil, nil, fmt.Errorf("%w: no region %q (regions: %s)", platform.ErrNotFound, in, strings.Join(rs.names(), ", "))
	}
	var out []sourceViolation
	var unknown []string
	self, _ := ownResidency(&cfg)
	var via *jetstream.StreamSource // the source that makes cfg resident
	for _, src := range streamSources(&cfg) {
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
		res, err := rs.residencyOf(ctx, from, &scfg)
		if err != nil {
			return nil, nil, fmt.Errorf("platform: residency check of %s in %s: %w", src.Name, from.Name, err)
		}
		if res.Residency != "" && self.Residency == "" {
			self, via = res, src
		}
		if src != cfg.Mirror && from != at && (res.Residency == "" || res.Residency == in) {
			unknown = append(unknown, fmt.Sprintf("a source of stream %s in region %s: sources are not carried across region links (%s is denied on them); mirror the topic instead", src.Name, from.Name, SourceLinkDeny))
		}
		if src == cfg.Mirror && from == at && res.Residency != "" {
			out = append(out, sourceViolation{Source: src, Mirror: true, Topic: res.What,
				Problem: fmt.Sprintf("%s is resident in %s: a mirror of stream %s in the same region receives on $JS.M.<id>, a subject the region link carries; source it instead", res.What, res.Residency, src.Name)})
		}
		if res.Residency != "" && res.Residency != in {
			what := "a mirror"
			if src != cfg.Mirror {
				what = "a source"
			}
			out = append(out, sourceViolation{Source: src, Mirror: src == cfg.Mirror, Topic: res.What,
				Problem: fmt.Sprintf("%s is resident in %s: %s of stream %s (region %s) in region %s would carry its events out of %s",
					res.What, res.Residency, what, src.Name, from.Name, in, res.Residency)})
		}
	}
	if copies && self.Residency != "" && len(out) == 0 {
		// cfg will hold resident data: no copy of it may exist outside
		// the data's region (a mirror made abroad before cfg held it).
		all, _ := rs.allStreams(ctx)
		for _, c := range rs.copiesOf(all, map[streamKey]bool{{in, cfg.Name}: true}) {
			if c.Region == self.Residency {
				continue
			}
			out = append(out, sourceViolation{Source: via, Mirror: via != nil && via == cfg.Mirror, Topic: self.What,
				Problem: fmt.Sprintf("%s is resident in %s: stream %s in region %s would hold it, and stream %s in region %s is a %s of %s: it would carry the events out of %s",
					self.What, self.Residency, cfg.Name, in, c.Stream, c.Region, c.How, c.Of, self.Residency)})
		}
	}
	if cfg.RePublish == nil || cfg.RePublish.Destination == "" {
		return out, unknown, nil
	}
	if self.Residency == "" {
		if s, err := at.JS.Stream(ctx, cfg.Name); err == nil {
			cur := s.CachedInfo().Config
			if r, err := rs.residencyOf(ctx, at, &cur); err == nil {
				self = r
			}
		} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, nil, fmt.Errorf("platform: residency check of %s in %s: %w", cfg.Name, in, err)
		}
	}
	if self.Residency == "" {
		return out, unknown, nil
	}
	dest := DestinationPattern(cfg.RePublish.Destination)
	covered := append(slices.Clone(self.Covered), cfg.Subjects...)
	if !slices.ContainsFunc(covered, func(c string) bool { return subjectWithin(dest, c) }) {
		allowed := "nowhere"
		if len(self.Covered) > 0 {
			allowed = "only under " + strings.Join(self.Covered, ", ")
		}
		out = append(out, sourceViolation{Republish: true, Topic: self.What,
			Problem: fmt.Sprintf("%s is resident in %s: stream %s republishing it to %s in region %s would put its events on subjects the region link carries (a resident stream republishes %s)",
				self.What, self.Residency, cfg.Name, cfg.RePublish.Destination, in, allowed)})
	}
	return out, unknown, nil
}

// DestinationPattern is the subjects a subject-transform destination
// (a republish destination) can produce: each token with a mapping
// function ({{wildcard(1)}}, ...) is any token.
func DestinationPattern(dest string) string {
	toks := strings.Split(dest, ".")
	for i, t := range toks {
		if strings.Contains(t, "{{") {
			toks[i] = "*"
		}
	}
	return strings.Join(toks, ".")
}

// subjectWithin reports whether every subject subj (a subject or a
// pattern) matches is also matched by pattern.
func subjectWithin(subj, pattern string) bool {
	st, pt := strings.Split(subj, "."), strings.Split(pattern, ".")
	for i, p := range pt {
		if p == ">" {
			return i < len(st)
		}
		if i >= len(st) {
			return false
		}
		switch s := st[i]; {
		case s == ">":
			return false
		case p == "*":
		case s == "*" || s != p:
			return false
		}
	}
	return len(st) == len(pt)
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

// residentEntriesOf returns the link deny list entries (ResidentDeny) of
// stream cfg about to be created or updated in region at when it holds
// resident data (residencyOf, or the residency of the stream of that name
// today); nil when it does not.
func (rs Regions) residentEntriesOf(ctx context.Context, at *Region, cfg jetstream.StreamConfig) ([]string, error) {
	r, err := rs.residencyOf(ctx, at, &cfg)
	if err != nil {
		return nil, err
	}
	cur := cfg
	if r.Residency == "" {
		s, err := at.JS.Stream(ctx, cfg.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		cur = s.CachedInfo().Config
		if r, err = rs.residencyOf(ctx, at, &cur); err != nil || r.Residency == "" {
			return nil, err
		}
	}
	var out []string
	if k := platform.StreamKind(&cur); (k == platform.StreamKindTopic || k == platform.StreamKindQueue) && cur.Metadata[platform.MetaResidency] != "" {
		out = append(out, platform.ObjectName(&cur))
	} else {
		out = append(out, ResidentStreamEntry+cfg.Name)
		for _, subj := range cfg.Subjects {
			out = append(out, ResidentSubjectEntry+subj)
		}
	}
	if cfg.RePublish != nil && cfg.RePublish.Destination != "" {
		out = append(out, ResidentSubjectEntry+DestinationPattern(cfg.RePublish.Destination))
	}
	return out, nil
}

// residencyKept returns the refusal of an update of stream cfg in region
// at that drops or changes the platform.residency the stream declares
// today ("" when it keeps it, or the stream declares none): a resident
// stream stays resident.
func residencyKept(ctx context.Context, at *Region, cfg jetstream.StreamConfig) (string, error) {
	s, err := at.JS.Stream(ctx, cfg.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	cur := s.CachedInfo().Config
	was, ok := ownResidency(&cur)
	if !ok || cfg.Metadata[platform.MetaResidency] == was.Residency {
		return "", nil
	}
	return fmt.Sprintf("%s is resident in %s: an update of stream %s in region %s may not drop or change its %s metadata (got %q)",
		was.What, was.Residency, cfg.Name, at.Name, platform.MetaResidency, cfg.Metadata[platform.MetaResidency]), nil
}
