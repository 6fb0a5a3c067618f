package redrive

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// Access is what one caller may do with the DLQs and redrives of a
// Service's scope. Every path that reaches a Service on a user's behalf
// (the web console, the control API behind platformctl dlq|redrive)
// builds one from the authenticated principal (never from a request
// field) and goes through Service.For, so the decision lives here only.
//
// A caller that is not All:
//
//   - sees a DLQ (entries, payloads, headers, fingerprints, previews) only
//     when it may consume its topic or queue (Consume), or, for a topic,
//     one of its groups (ConsumeGroups): then only that group's entries;
//   - sees, approves, rejects, runs, pauses, resumes or cancels a redrive
//     request only when it may see every entry the request froze;
//   - files or runs a redrive only into a destination it may publish to
//     (Publish: the DLQ's own topic or queue when none is named);
//   - files a redrive at most at MaxRate events/s: a request without a
//     rate is given MaxRate, one asking for more is refused (ErrInvalid)
//     saying the quota, and none runs or resumes above it.
//
// Roles widen this: Viewer sees everything of the scope; Approver also
// approves and rejects what it sees; Operator also files, runs, pauses,
// resumes and cancels what it sees (into Publish, at most at MaxRate).
// Seeing alone (a role) never lets a caller act; its consume permission
// on every entry of a request does.
type Access struct {
	// Principal is the caller (user@tenant, user@platform).
	Principal string
	// All: every DLQ and request of the scope, any destination, any rate
	// (a platform operator; a control request that is not signed, whose
	// sender holds the platform admin credentials).
	All bool
	// Consume names the topics and queues whose whole DLQ the caller may
	// see; ConsumeGroups maps a group it may consume to its topic.
	Consume       map[string]bool
	ConsumeGroups map[string]string
	// Publish maps a topic or queue the caller may publish to onto its
	// kind ("topic" or "queue").
	Publish map[string]string
	// Roles (tenancy's tenant roles) add to the permissions: Viewer sees
	// every DLQ and request of the scope; Approver (also a viewer)
	// approves and rejects any request; Operator (also a viewer) files,
	// runs, pauses, resumes and cancels any (into Publish, which then
	// holds every topic and queue of the tenant).
	Viewer, Approver, Operator bool
	// MaxRate caps a redrive's rate, events/s (the tenant's publish-rate
	// quota; 0: no cap).
	MaxRate float64
	// Tenant names the scope in messages.
	Tenant string
}

// FullAccess is the Access of a platform operator or a holder of the
// platform admin credentials.
func FullAccess(principal string) Access { return Access{Principal: principal, All: true} }

func (a Access) who() string {
	if a.Principal == "" {
		return "this caller"
	}
	return a.Principal
}

// groupsOf returns the groups of topic the caller may see the entries
// of, and whether it may see the whole object.
func (a Access) groupsOf(object string) (whole bool, groups []string) {
	if a.All || a.Viewer || a.Approver || a.Operator || a.Consume[object] {
		return true, nil
	}
	for g, t := range a.ConsumeGroups {
		if t == object {
			groups = append(groups, g)
		}
	}
	sort.Strings(groups)
	return false, groups
}

// MaySee reports whether the caller may see DLQ name (a topic or queue)
// at all.
func (a Access) MaySee(name string) bool {
	whole, groups := a.groupsOf(name)
	return whole || len(groups) > 0
}

// keep is the entry filter of DLQ name: nil when every entry is visible.
func (a Access) keep(name string) func(Entry) bool {
	whole, groups := a.groupsOf(name)
	if whole {
		return nil
	}
	return func(e Entry) bool { return slices.Contains(groups, e.Group) }
}

func (a Access) refuseSee(name string) error {
	return fmt.Errorf("%w: %s may not see the DLQ of %s: it may consume neither %s nor one of its groups (grant --sub %s, or a group of it, with platformctl user update, or the viewer role with platformctl user role)",
		ErrForbidden, a.who(), name, name, name)
}

// mayPublish checks dest as the caller names it (stored prefix removed):
// "" is the DLQ's object itself.
func (a Access) mayPublish(object, kind, dest string) error {
	if a.All {
		return nil
	}
	if dest == "" {
		if _, ok := a.Publish[object]; ok {
			return nil
		}
		return fmt.Errorf("%w: %s may not publish to %s %s, where this redrive sends its events back (grant --pub %s, or redrive into a destination it may publish to)",
			ErrForbidden, a.who(), kindOr(kind), object, object)
	}
	for name, k := range a.Publish {
		rest, ok := strings.CutPrefix(dest, name+".")
		if !ok || rest == "" {
			continue
		}
		if k == "queue" || !strings.Contains(rest, ".") {
			return nil
		}
	}
	return fmt.Errorf("%w: %s may not publish to destination %s: it is not a subject of a topic or queue it may publish to (its --pub: %s)",
		ErrForbidden, a.who(), dest, names(a.Publish))
}

func kindOr(k string) string {
	if k == "" {
		return "object"
	}
	return k
}

func names(m map[string]string) string {
	if len(m) == 0 {
		return "none"
	}
	return strings.Join(slices.Sorted(maps.Keys(m)), ", ")
}

// capRate applies MaxRate to req: unlimited becomes MaxRate, more is
// refused.
func (a Access) capRate(req *Request) error {
	if a.All || a.MaxRate <= 0 {
		return nil
	}
	if req.Rate == 0 {
		req.Rate = a.MaxRate
		return nil
	}
	if req.Rate > a.MaxRate {
		return fmt.Errorf("%w: rate: %g events/s is above tenant %s's publish-rate quota of %g events/s; ask for at most %g (0 asks for the quota)",
			ErrInvalid, req.Rate, a.Tenant, a.MaxRate, a.MaxRate)
	}
	return nil
}

// covers reports whether whole or groups cover every entry r froze.
func covers(r *Redrive, whole bool, groups []string) bool {
	if whole {
		return true
	}
	if len(groups) == 0 || len(r.ConsumerGroups) == 0 {
		return false
	}
	for _, g := range r.ConsumerGroups {
		if !slices.Contains(groups, g) {
			return false
		}
	}
	return true
}

// maySeeRequest checks that the caller may see every entry r froze: the
// whole object, or every group the selection holds entries of.
func (a Access) maySeeRequest(r *Redrive) error {
	if whole, groups := a.groupsOf(r.Object); covers(r, whole, groups) {
		return nil
	}
	return fmt.Errorf("%w: %s may not see every entry of redrive %s of %s (entries of groups %s), so it may neither see nor act on it",
		ErrForbidden, a.who(), r.ID, r.Object, strings.Join(r.ConsumerGroups, ", "))
}

// consumes reports whether the caller's permissions (not its roles) let
// it consume every entry r froze (or, r nil, some entry of object).
func (a Access) consumes(object string, r *Redrive) bool {
	whole := a.All || a.Consume[object]
	var groups []string
	for g, t := range a.ConsumeGroups {
		if t == object {
			groups = append(groups, g)
		}
	}
	if r == nil {
		return whole || len(groups) > 0
	}
	return covers(r, whole, groups)
}

// verbs a role grants on requests it may see.
const (
	verbApprove = "approve" // and reject
	verbRedrive = "redrive" // file, run, pause, resume, cancel
)

// mayAct checks verb on r (nil: filing a request of object): the caller
// may see r's entries, and consumes them or holds the role for verb.
func (a Access) mayAct(object string, r *Redrive, verb string) error {
	if r != nil {
		if err := a.maySeeRequest(r); err != nil {
			return err
		}
	} else if !a.MaySee(object) {
		return a.refuseSee(object)
	}
	if a.consumes(object, r) || (verb == verbApprove && a.Approver) || (verb == verbRedrive && a.Operator) {
		return nil
	}
	role := map[string]string{verbApprove: "approver", verbRedrive: "operator"}[verb]
	return fmt.Errorf("%w: %s may see the DLQ of %s but not %s a redrive of it: grant --sub %s, or the %s role (platformctl user role %s USER --add %s)",
		ErrForbidden, a.who(), object, verb, object, role, orTenant(a.Tenant), role)
}

func orTenant(t string) string {
	if t == "" {
		return "TENANT"
	}
	return t
}

// Guard is a Service as one caller may use it (Service.For): the same
// operations, each refused with ErrForbidden (nothing read or changed)
// when Access does not allow it.
type Guard struct {
	s *Service
	a Access
}

// For returns the service as a may use it.
func (s *Service) For(a Access) *Guard {
	if a.Tenant == "" {
		a.Tenant = s.cfg.Tenant
	}
	return &Guard{s: s, a: a}
}

// Service is the guarded service (for what needs no decision: Tenant,
// Instance).
func (g *Guard) Service() *Service { return g.s }

// Access is the caller's access.
func (g *Guard) Access() Access { return g.a }

// ListDLQs lists the DLQs the caller may see.
func (g *Guard) ListDLQs(ctx context.Context) ([]DLQ, error) {
	all, err := g.s.ListDLQs(ctx)
	if err != nil || g.a.All {
		return all, err
	}
	out := []DLQ{}
	for _, d := range all {
		if g.a.MaySee(d.Name) {
			out = append(out, d)
		}
	}
	return out, nil
}

// DescribeDLQ describes a DLQ the caller may see.
func (g *Guard) DescribeDLQ(ctx context.Context, name string) (DLQ, error) {
	d, err := g.s.DescribeDLQ(ctx, name)
	if err != nil {
		return DLQ{}, err
	}
	if !g.a.MaySee(d.Name) {
		return DLQ{}, g.a.refuseSee(d.Name)
	}
	return d, nil
}

// Entries lists the entries the caller may see.
func (g *Guard) Entries(ctx context.Context, f EntryFilter) ([]Entry, error) {
	d, err := g.DescribeDLQ(ctx, f.DLQ)
	if err != nil {
		return nil, err
	}
	f.keep = g.a.keep(d.Name)
	return g.s.Entries(ctx, f)
}

// Groups groups the entries the caller may see by fingerprint.
func (g *Guard) Groups(ctx context.Context, f EntryFilter) ([]Group, error) {
	d, err := g.DescribeDLQ(ctx, f.DLQ)
	if err != nil {
		return nil, err
	}
	f.keep = g.a.keep(d.Name)
	return g.s.Groups(ctx, f)
}

// Show returns one entry the caller may see.
func (g *Guard) Show(ctx context.Context, dlq string, seq uint64) (Entry, error) {
	d, err := g.DescribeDLQ(ctx, dlq)
	if err != nil {
		return Entry{}, err
	}
	e, err := g.s.Show(ctx, dlq, seq)
	if err != nil {
		return Entry{}, err
	}
	if keep := g.a.keep(d.Name); keep != nil && !keep(e) {
		return Entry{}, fmt.Errorf("%w: %s may not see entry %d of DLQ %s: another group dead-lettered it", ErrForbidden, g.a.who(), seq, d.Name)
	}
	return e, nil
}

// checkRequest applies the caller's access to req: it may see the DLQ,
// publish to the destination, and its rate is capped. A caller who sees
// only some groups' entries has the selection narrowed to those entries
// (explicit sequences), so nothing else is frozen.
func (g *Guard) checkRequest(ctx context.Context, req *Request) error {
	if g.a.All {
		return nil
	}
	if err := req.Validate(); err != nil {
		return err
	}
	d, err := g.DescribeDLQ(ctx, req.DLQ)
	if err != nil {
		return err
	}
	if err := g.a.mayAct(d.Name, nil, verbRedrive); err != nil {
		return err
	}
	if err := g.a.mayPublish(d.Name, d.Kind, g.unstored(req.Destination)); err != nil {
		return err
	}
	if err := g.a.capRate(req); err != nil {
		return err
	}
	if keep := g.a.keep(d.Name); keep != nil {
		seqs, err := g.visible(ctx, d, req.Selection, keep)
		if err != nil {
			return err
		}
		req.Selection = Selection{Seqs: seqs}
	}
	return nil
}

// visible resolves sel to the sequences of the entries keep lets the
// caller see; an explicit sequence it may not see is refused.
func (g *Guard) visible(ctx context.Context, d DLQ, sel Selection, keep func(Entry) bool) ([]uint64, error) {
	want := map[uint64]bool{}
	from, to := sel.FromSeq, sel.ToSeq
	for _, q := range sel.Seqs {
		want[q] = true
	}
	if len(sel.Seqs) > 0 {
		from, to = slices.Min(sel.Seqs), slices.Max(sel.Seqs)
	}
	var out []uint64
	var hidden uint64
	err := scan(ctx, g.s.js, d.Stream, from, func(m *jetstream.RawStreamMsg) bool {
		if to > 0 && m.Sequence > to {
			return false
		}
		e := toEntry(m, false)
		if (len(want) > 0 && !want[e.Seq]) || (sel.Fingerprint != "" && e.Fingerprint != sel.Fingerprint) {
			return true
		}
		if !keep(e) {
			if len(want) > 0 {
				hidden = e.Seq
				return false
			}
			return true
		}
		out = append(out, e.Seq)
		return len(out) <= MaxSelection
	})
	switch {
	case err != nil:
		return nil, err
	case hidden > 0:
		return nil, fmt.Errorf("%w: %s may not redrive entry %d of DLQ %s: another group dead-lettered it", ErrForbidden, g.a.who(), hidden, d.Name)
	case len(out) == 0:
		return nil, fmt.Errorf("%w: the selection matches no entry of DLQ %s that %s may see (it sees the entries of groups it may consume only)", ErrInvalid, d.Name, g.a.who())
	}
	return out, nil
}

func (g *Guard) unstored(dest string) string {
	if p := g.s.cfg.NamePrefix; p != "" {
		return strings.TrimPrefix(dest, p)
	}
	return dest
}

// Preview is Service.Preview for a request the caller may file.
func (g *Guard) Preview(ctx context.Context, req Request) (Preview, error) {
	if err := g.checkRequest(ctx, &req); err != nil {
		return Preview{}, err
	}
	return g.s.Preview(ctx, req)
}

// Submit is Service.Submit for a request the caller may file.
func (g *Guard) Submit(ctx context.Context, req Request) (Status, error) {
	if err := g.checkRequest(ctx, &req); err != nil {
		return Status{}, err
	}
	return g.s.Submit(ctx, req)
}

// record reads request id and checks the caller may see it, and, verb
// not "", do verb on it.
func (g *Guard) record(ctx context.Context, id, verb string) (*Redrive, error) {
	r, _, err := g.s.get(ctx, id)
	if err != nil {
		return nil, err
	}
	switch {
	case g.a.All:
		return r, nil
	case verb == "":
		return r, g.a.maySeeRequest(r)
	}
	return r, g.a.mayAct(r.Object, r, verb)
}

// mayRun checks a run or resume of r: its destination and rate.
func (g *Guard) mayRun(r *Redrive) error {
	if g.a.All {
		return nil
	}
	if err := g.a.mayPublish(r.Object, r.Kind, g.unstored(r.Destination)); err != nil {
		return err
	}
	if g.a.MaxRate > 0 && (r.Rate == 0 || r.Rate > g.a.MaxRate) {
		return fmt.Errorf("%w: redrive %s asks for %s, above tenant %s's publish-rate quota of %g events/s: file a new request at most at the quota",
			ErrForbidden, r.ID, rateText(r.Rate), g.a.Tenant, g.a.MaxRate)
	}
	return nil
}

func rateText(r float64) string {
	if r == 0 {
		return "an unlimited rate"
	}
	return fmt.Sprintf("%g events/s", r)
}

// Get is Service.Get of a request the caller may see.
func (g *Guard) Get(ctx context.Context, id string) (Status, error) {
	if _, err := g.record(ctx, id, ""); err != nil {
		return Status{}, err
	}
	return g.s.Get(ctx, id)
}

// DryRun is Service.DryRun of a request the caller may see.
func (g *Guard) DryRun(ctx context.Context, id string) (Preview, error) {
	if _, err := g.record(ctx, id, ""); err != nil {
		return Preview{}, err
	}
	return g.s.DryRun(ctx, id)
}

// List lists the requests the caller may see.
func (g *Guard) List(ctx context.Context, f ListFilter) ([]Status, error) {
	all, err := g.s.List(ctx, f)
	if err != nil || g.a.All {
		return all, err
	}
	out := []Status{}
	for _, st := range all {
		if g.a.maySeeRequest(&st.Redrive) == nil {
			out = append(out, st)
		}
	}
	return out, nil
}

// History returns the audit records of the requests the caller may see.
func (g *Guard) History(ctx context.Context, f HistoryFilter) ([]AuditRecord, error) {
	if g.a.All {
		return g.s.History(ctx, f)
	}
	if f.ID != "" {
		if _, err := g.record(ctx, f.ID, ""); err != nil {
			return nil, err
		}
		return g.s.History(ctx, f)
	}
	reqs, err := g.List(ctx, ListFilter{})
	if err != nil {
		return nil, err
	}
	ids := map[string]bool{}
	for _, st := range reqs {
		ids[st.ID] = true
	}
	recs, err := g.s.History(ctx, f)
	if err != nil {
		return nil, err
	}
	out := []AuditRecord{}
	for _, r := range recs {
		if ids[r.Target] {
			out = append(out, r)
		}
	}
	return out, nil
}

// Approve is Service.Approve by a caller who may see every entry of the
// request (the service refuses the requester on a review: required DLQ).
func (g *Guard) Approve(ctx context.Context, id, actor, note string) (Status, error) {
	return g.act(ctx, id, verbApprove, false, actor, note, g.s.Approve)
}

// Reject is Service.Reject of a request the caller may see.
func (g *Guard) Reject(ctx context.Context, id, actor, note string) (Status, error) {
	return g.act(ctx, id, verbApprove, false, actor, note, g.s.Reject)
}

// Cancel is Service.Cancel of a request the caller may see.
func (g *Guard) Cancel(ctx context.Context, id, actor, note string) (Status, error) {
	return g.act(ctx, id, verbRedrive, false, actor, note, g.s.Cancel)
}

// Pause is Service.Pause of a request the caller may see.
func (g *Guard) Pause(ctx context.Context, id, actor, note string) (Status, error) {
	return g.act(ctx, id, verbRedrive, false, actor, note, g.s.Pause)
}

// Run is Service.Run by a caller who may see the request and publish to
// its destination at its rate.
func (g *Guard) Run(ctx context.Context, id, actor, note string) (Status, error) {
	return g.act(ctx, id, verbRedrive, true, actor, note, g.s.Run)
}

// Resume is Service.Resume by a caller who may see the request and
// publish to its destination at its rate.
func (g *Guard) Resume(ctx context.Context, id, actor, note string) (Status, error) {
	return g.act(ctx, id, verbRedrive, true, actor, note, g.s.Resume)
}

// act calls transition on request id only once the caller may do verb on
// it and, if sends, may publish to its destination at its rate; a refusal
// calls nothing.
func (g *Guard) act(ctx context.Context, id, verb string, sends bool, actor, note string, transition func(ctx context.Context, id, actor, note string) (Status, error)) (Status, error) {
	r, err := g.record(ctx, id, verb)
	if err == nil && sends {
		err = g.mayRun(r)
	}
	if err != nil {
		return Status{}, err
	}
	return transition(ctx, id, actor, note)
}
