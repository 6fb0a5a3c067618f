package region

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/platform"
)

// LinkDeny returns the subjects that must never cross a region link for
// the resident topics among topics: each one's core subjects (<name>.>),
// its dead letters ($DLQ.<stream>.>), and StreamDeny of the topic's stream
// and its DLQ streams: every JetStream API request that names them, in
// every domain, but the configuration and state reads (STREAM.INFO,
// CONSUMER.INFO/NAMES/LIST; STREAM.LIST names no stream), which the
// residency checks read through the link.
func LinkDeny(topics []platform.TopicSpec) []string {
	return residentsDeny(topics, func(t platform.TopicSpec) (string, string) { return t.Name, t.Residency })
}

// QueueLinkDeny is LinkDeny for the resident queues among queues: a
// queue's subjects (<name>.>), its dead letters and the API calls that
// read its stream and DLQ streams.
func QueueLinkDeny(queues []platform.QueueSpec) []string {
	return residentsDeny(queues, func(q platform.QueueSpec) (string, string) { return q.Name, q.Residency })
}

// residentsDeny is ResidentDeny of each of specs whose residency, as
// nameResidency reads it, is set, in order.
func residentsDeny[S any](specs []S, nameResidency func(S) (name, residency string)) []string {
	var out []string
	for _, s := range specs {
		if name, residency := nameResidency(s); residency != "" {
			out = append(out, ResidentDeny(name)...)
		}
	}
	return out
}

// CatalogLinkDeny is LinkDeny of the catalog's resident topics and
// QueueLinkDeny of its resident queues, in name order.
func CatalogLinkDeny(c platform.Catalog) []string {
	var ts []platform.TopicSpec
	for _, k := range slices.Sorted(maps.Keys(c.Topics)) {
		ts = append(ts, c.Topics[k])
	}
	var qs []platform.QueueSpec
	for _, k := range slices.Sorted(maps.Keys(c.Queues)) {
		qs = append(qs, c.Queues[k])
	}
	return append(LinkDeny(ts), QueueLinkDeny(qs)...)
}

// Entries of a link deny list's resident objects besides topic and queue
// names (ResidentDeny): a stream holding resident data by propagation or
// declaration (a copy of a resident topic, a resident KV or object-store
// bucket), and a subject that carries resident data (such a stream's own
// subjects, a resident stream's republish destination).
const (
	ResidentStreamEntry  = "stream:"
	ResidentSubjectEntry = "subject:"
)

// ResidentLinkDeny reads every stream of js's domain and returns the link
// deny subjects of the resident data it holds, and the entries they come
// from (for ResidentDeny), sorted: the names of resident topics and queues
// (their platform.residency metadata), and, residency propagating, every
// other stream that is resident (declares platform.residency, like a
// resident KV_<bucket> or OBJ_<bucket>, or mirrors or sources resident
// data in the domain, transitively) as ResidentStreamEntry+name with its
// subjects as ResidentSubjectEntry+subject, and the republish
// destination of every resident stream that has one. It is how a
// platformd learns the residency of objects it did not declare itself:
// applied through another node's control API, made by hand with the nats
// CLI, or living in another region (read on that region's connection).
func ResidentLinkDeny(ctx context.Context, js jetstream.JetStream) ([]string, []string, error) {
	var cfgs []jetstream.StreamConfig
	l := js.ListStreams(ctx)
	for si := range l.Info() {
		cfgs = append(cfgs, si.Config)
	}
	if err := l.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return nil, nil, fmt.Errorf("platform: list streams for the link deny list: %w", err)
	}
	names := ResidentEntries(cfgs)
	var out []string
	for _, n := range names {
		out = append(out, ResidentDeny(n)...)
	}
	return MergeDeny(out), names, nil
}

// ResidentEntries returns the deny list entries (see ResidentLinkDeny) of
// the resident data among cfgs, the streams of one domain: residency is
// followed through the mirrors and sources within the domain.
func ResidentEntries(cfgs []jetstream.StreamConfig) []string {
	byName := map[string]*jetstream.StreamConfig{}
	for i := range cfgs {
		byName[cfgs[i].Name] = &cfgs[i]
	}
	memo := map[string]string{}
	var resOf func(name string, depth int) string
	resOf = func(name string, depth int) string {
		if r, ok := memo[name]; ok {
			return r
		}
		c := byName[name]
		if c == nil || depth > maxResidencyDepth {
			return ""
		}
		memo[name] = "" // a cycle reads as not resident along it
		r := c.Metadata[platform.MetaResidency]
		if k := platform.StreamKind(c); r == "" && (k == platform.StreamKindDLQ || k == platform.StreamKindDLQEvents) {
			if oc := byName[platform.StreamName(c.Metadata[platform.MetaDLQOf])]; oc != nil {
				r = oc.Metadata[platform.MetaResidency]
			}
		}
		for _, src := range streamSources(c) {
			if r != "" {
				break
			}
			if sourceDomain(src) == "" {
				r = resOf(src.Name, depth+1)
			}
		}
		memo[name] = r
		return r
	}
	seen := map[string]bool{}
	var out []string
	add := func(e string) {
		if !seen[e] {
			seen[e] = true
			out = append(out, e)
		}
	}
	covered := map[string]bool{} // streams a topic or queue name covers
	for _, c := range cfgs {
		if k := platform.StreamKind(&c); (k == platform.StreamKindTopic || k == platform.StreamKindQueue) && c.Metadata[platform.MetaResidency] != "" && c.Mirror == nil {
			n := platform.ObjectName(&c)
			add(n)
			covered[platform.StreamName(n)], covered[platform.DLQStream(n)], covered[platform.DLQEventsStream(n)] = true, true, true
		}
	}
	for _, c := range cfgs {
		if resOf(c.Name, 0) == "" {
			continue
		}
		if !covered[c.Name] {
			add(ResidentStreamEntry + c.Name)
			for _, subj := range c.Subjects {
				add(ResidentSubjectEntry + subj)
			}
		}
		if c.RePublish != nil && c.RePublish.Destination != "" {
			add(ResidentSubjectEntry + DestinationPattern(c.RePublish.Destination))
		}
	}
	sort.Strings(out)
	return out
}

// ResidentDeny is the link deny list of one entry: a resident topic or
// queue by name (its subjects <name>.>, its dead letters $DLQ.<stream>.>
// and StreamDeny of its stream and DLQ streams), ResidentStreamEntry+name
// (StreamDeny of that stream) or ResidentSubjectEntry+subject (that
// subject).
func ResidentDeny(name string) []string {
	if st, ok := strings.CutPrefix(name, ResidentStreamEntry); ok {
		return StreamDeny(st)
	}
	if subj, ok := strings.CutPrefix(name, ResidentSubjectEntry); ok {
		return []string{subj}
	}
	s := platform.StreamName(name)
	out := []string{name + ".>", "$DLQ." + s + ".>"}
	for _, stream := range []string{s, platform.DLQStream(name), platform.DLQEventsStream(name)} {
		out = append(out, StreamDeny(stream)...)
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
