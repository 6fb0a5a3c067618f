package region

import (
	"sort"

	"github.com/msgplatform/platform/platform"
)

// LinkTable is what the dialling side of a region link derives the link's
// deny list from: the subjects configured by hand and every resident
// object known, by name, with the region that holds it. Only the dialling
// side's deny list applies to a leafnode link, in both directions, so the
// table holds the residents of both sides.
type LinkTable struct {
	// Configured are subjects denied by configuration
	// (node.leaf.remotes[].deny).
	Configured []string
	// Residents maps a resident topic or queue name, or a
	// ResidentStreamEntry or ResidentSubjectEntry, to its region.
	Residents map[string]string
}

// Add records name as resident in region; a name known already keeps the
// region it was first added with.
func (t *LinkTable) Add(name, region string) {
	if t.Residents == nil {
		t.Residents = map[string]string{}
	}
	if _, ok := t.Residents[name]; !ok {
		t.Residents[name] = region
	}
}

// AddCatalog adds the resident topics and queues of c, each in its
// residency.
func (t *LinkTable) AddCatalog(c platform.Catalog) {
	for _, tp := range c.Topics {
		if tp.Residency != "" {
			t.Add(tp.Name, tp.Residency)
		}
	}
	for _, q := range c.Queues {
		if q.Residency != "" {
			t.Add(q.Name, q.Residency)
		}
	}
}

// Deny is the link's deny list: Configured, then ResidentDeny of every
// resident (sorted, so the list does not depend on the order residents
// were added), then FixedLinkDeny; each subject once.
func (t *LinkTable) Deny() []string {
	var derived []string
	for name := range t.Residents {
		derived = append(derived, ResidentDeny(name)...)
	}
	sort.Strings(derived)
	return MergeDeny(t.Configured, derived, FixedLinkDeny())
}

// SourceLinkDeny belongs on every region link's deny list: the deliver
// subjects JetStream picks for a stream's sources ($JS.S.<id>) never
// cross, so a copy of resident data sourced within its region is not
// readable abroad by subscribing to them. A source across regions is
// therefore not carried; CheckStream refuses one and names the mirror.
const SourceLinkDeny = "$JS.S.>"

// FixedLinkDeny are the subjects on every region link's deny list,
// whatever is resident: GateLinkDeny and SourceLinkDeny.
func FixedLinkDeny() []string { return []string{GateLinkDeny, SourceLinkDeny} }
