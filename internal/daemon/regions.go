package daemon

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgplatform/platform/conf"
	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/platform/region"
)

// regionsState is the daemon in mode regions: every region of
// conf.regions runs in this process; the first (home) serves the control
// API, the catalog's non-resident objects and /metrics. Each region is
// reached on its own admin connection, never through the link.
type regionsState struct {
	all  *embeddednats.Regions
	conn []*nats.Conn
	list region.Regions
	recs map[string]*catalog.Reconciler

	mu       sync.Mutex
	resident map[string]string // resident topics and queues known: name -> residency

	// guard refuses cross-border copies of resident topics made directly
	// through the JetStream API (see region.Guard).
	guard *region.Guard

	// stop ends the group position recorder and the resident deny
	// keeper; done and denyDone are closed when they have.
	stop, done, denyDone chan struct{}
}

// positionInterval is how often the origin's group positions of every
// mirrored topic are recorded in the mirror's region (what a failover
// with the origin gone resumes from; the duplicate window it reports is
// at most the events of one interval plus the mirror's lag).
const positionInterval = 5 * time.Second

// startRegions starts every region, links them with the residency deny
// list of the declared catalog, applies the declared topics resident in a
// non-home region there (taking them and their groups out of the catalog
// the home reconciler applies) and registers the mirror lag metrics.
func (d *Daemon) startRegions(ctx context.Context) error {
	rc := d.cfg.Regions.RegionsConfig
	var topics []platform.TopicSpec
	for _, t := range d.cfg.Catalog.Topics {
		topics = append(topics, t)
	}
	rc.Deny = region.MergeDeny(rc.Deny, region.CatalogLinkDeny(d.cfg.Catalog), region.FixedLinkDeny())
	all, err := embeddednats.NewRegions(rc, d.trust)
	if err != nil {
		return err
	}
	rs := &regionsState{all: all, recs: map[string]*catalog.Reconciler{}, resident: map[string]string{}}
	d.regions = rs
	if err := all.Start(ctx); err != nil {
		return err
	}
	for _, t := range topics {
		if t.Residency != "" {
			rs.resident[t.Name] = t.Residency
		}
	}
	for _, q := range d.cfg.Catalog.Queues {
		if q.Residency != "" {
			rs.resident[q.Name] = q.Residency
		}
	}
	for _, f := range all.Fabrics() {
		nc, err := f.Connect(nats.Name("platformd-"+f.Config().Region.Name), nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond))
		if err != nil {
			return fmt.Errorf("daemon: connect to region %s: %w", f.Config().Region.Name, err)
		}
		rs.conn = append(rs.conn, nc)
		js, err := jetstream.New(nc)
		if err != nil {
			return err
		}
		r := f.Config().Region
		rs.list = append(rs.list, region.Region{Name: r.Name, Domain: r.Domain, JS: js})
		rs.recs[r.Name] = catalog.NewReconciler(js, catalog.ReconcilerOptions{DefaultReplicas: f.Config().Durability.Replicas, Logger: d.log})
	}
	home := all.Fabrics()[0]
	d.nodes, d.region = home.Nodes(), home.Config().Region

	// Objects of a region other than home are applied there; the home
	// reconciler gets the rest of the catalog.
	cat := d.cfg.Catalog
	cat.Topics, cat.Groups, cat.Queues = maps.Clone(cat.Topics), maps.Clone(cat.Groups), maps.Clone(cat.Queues)
	opts := catalog.ApplyOptions{AllowReducedReplicas: d.cfg.Reconcile.AllowReducedReplicas, AllowCleanupChange: d.cfg.Reconcile.AllowCleanupChange}
	// away applies a topic or queue (kind) name with apply in region
	// where, unless where is home; a region the installation lacks is a
	// configuration error.
	away := func(kind, name, where string, apply func(*catalog.Reconciler) error) error {
		if where == d.region.Name {
			return nil
		}
		rec := rs.recs[where]
		if rec == nil {
			return fmt.Errorf("%w: %ss.%s.residency: no region %q in regions.fabrics", conf.ErrInvalid, kind, name, where)
		}
		if err := apply(rec); err != nil {
			return fmt.Errorf("daemon: reconcile %s %s in region %s: %w", kind, name, where, err)
		}
		return nil
	}
	for name, t := range d.cfg.Catalog.Topics {
		err := away("topic", name, region.OfTopic(t, d.region.Name), func(rec *catalog.Reconciler) error {
			part := platform.Catalog{Topics: map[string]platform.TopicSpec{name: t}, Groups: map[string]platform.GroupSpec{}}
			delete(cat.Topics, name)
			for gn, g := range d.cfg.Catalog.Groups {
				if g.Topic == name {
					part.Groups[gn] = g
					delete(cat.Groups, gn)
				}
			}
			_, err := rec.Apply(ctx, part, opts)
			return err
		})
		if err != nil {
			return err
		}
	}
	for name, q := range d.cfg.Catalog.Queues {
		err := away("queue", name, region.OfQueue(q, d.region.Name), func(rec *catalog.Reconciler) error {
			delete(cat.Queues, name)
			_, err := rec.ApplyQueue(ctx, q, opts)
			return err
		})
		if err != nil {
			return err
		}
	}
	d.cfg.Catalog = cat
	auditReplicas := home.Config().Durability.Replicas
	for _, f := range all.Fabrics() {
		auditReplicas = min(auditReplicas, f.Config().Durability.Replicas)
	}
	// The gate refuses such a copy at the JetStream API request itself, on
	// every node of every region (all in this process).
	gate := d.residencyGate(func(region string) []*embeddednats.Node {
		if f := all.Region(region); f != nil {
			return f.Nodes()
		}
		return nil
	})
	guard, err := region.StartGuard(ctx, rs.list, region.GuardOptions{Logger: d.log, Replicas: auditReplicas, Gate: gate})
	if err != nil {
		return fmt.Errorf("daemon: residency guard: %w", err)
	}
	rs.guard = guard
	registerResidencyMetrics(d.reg, guard)
	d.reg.MustRegister(region.NewMirrorCollector(func() region.Regions { return rs.list }))
	rs.stop, rs.done = make(chan struct{}), make(chan struct{})
	go recordPositions(rs.list, positionInterval, rs.stop, rs.done)
	return d.keepResidentDeny()
}

// applyTopic is the control API's topic apply: in mode regions a topic is
// created in its residency region (home without one), and a topic newly
// known to be resident goes on the link's deny list before it is created,
// so none of its events can cross in the meantime. In mode node with a
// leafnode link a resident topic goes on the node's link deny list first;
// on the listening side of the link (node.leaf.port) every peer region's
// platformds confirm it on their link deny list first (addPeerResident),
// or the apply is refused and nothing is created.
func (d *Daemon) applyTopic(ctx context.Context, spec platform.TopicSpec, o catalog.ApplyOptions) (catalog.Change, error) {
	where := region.OfTopic(spec, d.region.Name)
	return d.applyResident(ctx, "topic", spec.Name, spec.Residency, where, o, func(rec *catalog.Reconciler, o catalog.ApplyOptions) (catalog.Change, error) {
		return rec.ApplyTopic(ctx, spec, o)
	})
}

// applyQueue is applyTopic for a queue: in mode regions created in its
// residency region (home without one), a resident queue on the link's
// deny list before it is created; in mode node on the node's link deny
// list first.
func (d *Daemon) applyQueue(ctx context.Context, spec platform.QueueSpec, o catalog.ApplyOptions) (catalog.Change, error) {
	where := region.OfQueue(spec, d.region.Name)
	return d.applyResident(ctx, "queue", spec.Name, spec.Residency, where, o, func(rec *catalog.Reconciler, o catalog.ApplyOptions) (catalog.Change, error) {
		return rec.ApplyQueue(ctx, spec, o)
	})
}

// applyResident applies a topic or queue (kind) name of residency (""
// for none) with apply: in mode regions on the reconciler of region
// where, in mode node on the node's; a resident name is on every link
// deny list that must hold it first (see applyTopic). Bad input is
// refused before any link changes.
func (d *Daemon) applyResident(ctx context.Context, kind, name, residency, where string, o catalog.ApplyOptions, apply func(*catalog.Reconciler, catalog.ApplyOptions) (catalog.Change, error)) (catalog.Change, error) {
	rs := d.regions
	if rs == nil {
		if err := d.ownResidency(kind, name, residency); err != nil {
			return catalog.Change{}, err
		}
		if residency != "" && !o.DryRun {
			dry := o
			dry.DryRun = true
			if _, err := apply(d.rec, dry); err != nil {
				return catalog.Change{}, err
			}
			if err := d.addPeerResident(ctx, kind, name); err != nil {
				return catalog.Change{}, err
			}
			if err := d.addLinkResident(name); err != nil {
				return catalog.Change{}, err
			}
		}
		return apply(d.rec, o)
	}
	rec, err := rs.regionRec(ctx, where, kind, name)
	if err != nil {
		return catalog.Change{}, err
	}
	if residency != "" && !o.DryRun {
		if err := d.addResident(ctx, name, residency); err != nil {
			return catalog.Change{}, err
		}
	}
	return apply(rec, o)
}

// regionRec is the reconciler of region where for a topic or queue (kind)
// name. It refuses a region that is not one of the installation's, and a
// name whose primary stream already lives in another region (a second
// primary).
func (rs *regionsState) regionRec(ctx context.Context, where, kind, name string) (*catalog.Reconciler, error) {
	rec := rs.recs[where]
	if rec == nil {
		return nil, fmt.Errorf("%w: residency %q is not a region of this installation (regions: %s)", platform.ErrInvalidSpec, where, strings.Join(rs.all.Names(), ", "))
	}
	for _, r := range rs.list {
		if r.Name == where {
			continue
		}
		if s, err := r.JS.Stream(ctx, platform.StreamName(name)); err == nil {
			md := s.CachedInfo().Config.Metadata
			if s.CachedInfo().Config.Mirror == nil && md["platform.mirror_of"] == "" {
				return nil, fmt.Errorf("%w: %s %s already lives in region %s; it cannot also be created in %s", platform.ErrConflict, kind, name, r.Name, where)
			}
		}
	}
	return rec, nil
}

// addResident puts a resident topic or queue on the link's deny list (a
// link reconnect, see embeddednats.Node.SetLeafDeny) unless it is there.
func (d *Daemon) addResident(ctx context.Context, name, residency string) error {
	return d.addResidents(ctx, residency, name)
}

// addResidents puts resident entries (topic and queue names, or the
// stream and subject entries of region.ResidentDeny) of region
// residency on the link's deny list in one link update, unless they are
// all there. The list only grows.
func (d *Daemon) addResidents(ctx context.Context, residency string, names ...string) error {
	rs := d.regions
	rs.mu.Lock()
	defer rs.mu.Unlock()
	changed := false
	for _, name := range names {
		// The deny list depends on the names only: a name known already
		// (seen in another region's streams too) is not a change.
		if _, ok := rs.resident[name]; !ok {
			rs.resident[name] = residency
			changed = true
		}
	}
	if !changed {
		return nil
	}
	var derived []string
	for _, n := range slices.Sorted(maps.Keys(rs.resident)) {
		derived = append(derived, region.ResidentDeny(n)...)
	}
	deny := region.MergeDeny(d.cfg.Regions.Deny, derived, region.FixedLinkDeny())
	if err := rs.all.SetDeny(ctx, deny); err != nil {
		return fmt.Errorf("daemon: update the region link for resident %s: %w", strings.Join(names, ", "), err)
	}
	d.log.Info("platformd: region link deny list applied", "subjects", len(deny), "added", strings.Join(names, ","))
	return nil
}

// keepResidentDeny, in mode regions, reads the resident data of every
// region (region.ResidentLinkDeny: resident topics and queues, copies
// of them, resident buckets, republish destinations) at every stream
// create or update advisory and every linkRefreshInterval, and adds what
// the link does not deny yet: the backstop for a resident stream the
// residency gate did not see before it existed. It returns at once; the
// loop ends with rs.stop.
func (d *Daemon) keepResidentDeny() error {
	rs := d.regions
	kick := make(chan struct{}, 1)
	poke := func(*nats.Msg) {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	var subs []*nats.Subscription
	for _, nc := range rs.conn {
		for _, action := range []string{"CREATED", "UPDATED"} {
			sub, err := nc.Subscribe("$JS.EVENT.ADVISORY.STREAM."+action+".*", poke)
			if err != nil {
				return fmt.Errorf("daemon: resident link deny list: %w", err)
			}
			subs = append(subs, sub)
		}
	}
	rs.denyDone = make(chan struct{})
	go func() {
		defer close(rs.denyDone)
		defer func() {
			for _, s := range subs {
				_ = s.Unsubscribe()
			}
		}()
		tick := time.NewTicker(linkRefreshInterval)
		defer tick.Stop()
		for nextLinkRefresh(rs.stop, tick.C, kick) {
			for _, r := range rs.list {
				ctx, cancel := context.WithTimeout(context.Background(), linkRefreshInterval)
				_, names, err := region.ResidentLinkDeny(ctx, r.JS)
				if err == nil && len(names) > 0 {
					err = d.addResidents(ctx, r.Name, names...)
				}
				cancel()
				if err != nil {
					d.log.Warn("platformd: region link deny list not updated from the resident data of a region", "region", r.Name, "err", err)
				}
			}
		}
	}()
	return nil
}

// startNodeGuard starts, in mode node with a leafnode link, the residency
// guard of the node's own region (region.Guard with
// ThroughLink: the source of a hand-made mirror in another domain is
// checked through the link) and its gate on this platformd's node. Every
// node of the region runs one; they act on the same advisories, the audit
// record is written once; the gates of the region serve its requests in
// one queue group.
func (d *Daemon) startNodeGuard(ctx context.Context) error {
	if err := d.startPeers(ctx); err != nil {
		return err
	}
	if err := d.startLinkDeny(ctx); err != nil {
		return err
	}
	if d.cfg.Mode != conf.ModeNode || !d.cfg.Node.Leaf.Enabled() {
		return nil
	}
	r := d.region
	r.EnsureDefaults()
	own := region.Regions{{Name: r.Name, Domain: r.Domain, JS: d.js}}
	gate := d.residencyGate(func(region string) []*embeddednats.Node {
		if region != r.Name {
			return nil
		}
		return d.nodes
	})
	g, err := region.StartGuard(ctx, own, region.GuardOptions{Logger: d.log, Replicas: d.cfg.Durability().Replicas, ThroughLink: true, Gate: gate})
	if err != nil {
		return fmt.Errorf("daemon: residency guard: %w", err)
	}
	d.nodeGuard = g
	registerResidencyMetrics(d.reg, g)
	return nil
}

// registerResidencyMetrics exports the guard's refusals: every refusal,
// and those of its gate at the request (nothing was created).
func registerResidencyMetrics(reg prometheus.Registerer, g *region.Guard) {
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "platform_residency_refusals_total",
			Help: "Streams refused for carrying a resident topic out of its region: at the JetStream API request (the residency gate) or deleted/trimmed after the fact (the guard)."},
			func() float64 { return float64(g.Refused()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "platform_residency_refused_requests_total",
			Help: "Stream create/update requests the residency gate refused at the request (the requester got the error; nothing was created)."},
			func() float64 { return float64(g.RefusedAtRequest()) }),
	)
}

// beforeResident is the residency gate's BeforeResident: the entries of a
// stream about to hold resident data of region go on the link's deny list
// first. In mode regions on every link; in mode node with a leafnode link
// on this node's list and, on the listening side, confirmed by every peer
// region (addPeerResident).
func (d *Daemon) beforeResident(ctx context.Context, region string, entries []string) error {
	if d.regions != nil {
		return d.addResidents(ctx, region, entries...)
	}
	for _, e := range entries {
		if err := d.addPeerResident(ctx, "stream", e); err != nil {
			return err
		}
	}
	return d.addLinkResidents(entries...)
}

// residencyGate is the gate of the regions whose in-process nodes nodes
// returns, in the platform account, its forward token derived from the
// installation's trust material (the same on every platformd).
func (d *Daemon) residencyGate(nodes func(region string) []*embeddednats.Node) *region.GateOptions {
	return &region.GateOptions{
		BeforeResident: d.beforeResident,
		Account:        d.trust.AdminAccount(),
		Secret:         []byte(d.trust.AdminAccountSigningSeed),
		Servers: func(region string) []*server.Server {
			var out []*server.Server
			for _, n := range nodes(region) {
				if s := n.Server(); s != nil {
					out = append(out, s)
				}
			}
			return out
		},
	}
}

func (d *Daemon) closeRegions(ctx context.Context) error {
	if d.nodeGuard != nil {
		d.nodeGuard.Stop()
	}
	d.closePeers()
	rs := d.regions
	if rs == nil {
		return nil
	}
	if rs.stop != nil {
		select {
		case <-rs.stop:
		default:
			close(rs.stop)
			<-rs.done
			if rs.denyDone != nil {
				<-rs.denyDone
			}
		}
	}
	if rs.guard != nil {
		rs.guard.Stop()
	}
	for _, nc := range rs.conn {
		nc.Close()
	}
	return rs.all.Close(ctx)
}

// regionEndpoints are the control API's region and residency operations:
// on every region in mode regions, on this node's region and its peers in
// mode node with regions.peers; answered with a clear error otherwise.
func (d *Daemon) regionEndpoints() []control.Endpoint {
	return []control.Endpoint{
		regionRep(d, "region_list", region.SubjList, 0, func(ctx context.Context, rs region.Regions, _ struct{}) ([]region.Info, error) {
			out := []region.Info{}
			for i, r := range rs {
				ri := region.Info{Name: r.Name, Domain: r.Domain, Home: i == 0}
				n := 0
				l := r.JS.StreamNames(ctx)
				for range l.Name() {
					n++
				}
				if err := l.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
					ri.Streams, ri.Error = -1, err.Error()
				} else {
					ri.Streams = n
				}
				out = append(out, ri)
			}
			return out, nil
		}),
		regionRep(d, "region_mirror", region.SubjMirror, 0, func(ctx context.Context, rs region.Regions, r region.MirrorRequest) (region.MirrorStatus, error) {
			st, err := rs.Mirror(ctx, r)
			return st, residencyRefusal(err)
		}),
		regionRep(d, "region_mirrors", region.SubjMirrors, 0, func(ctx context.Context, rs region.Regions, _ struct{}) ([]region.MirrorStatus, error) {
			ms, err := rs.Mirrors(ctx)
			if ms == nil {
				ms = []region.MirrorStatus{}
			}
			return ms, err
		}),
		{Name: "region_topic_mirrors", Subject: region.SubjTopicMirrors, Handle: control.JSON(func(ctx context.Context, r control.NameRequest) ([]region.MirrorStatus, error) {
			out := []region.MirrorStatus{}
			list, ok := d.regionList()
			if !ok {
				return out, nil
			}
			ms, err := list.Mirrors(ctx)
			for _, m := range ms {
				if m.Topic == r.Name {
					out = append(out, m)
				}
			}
			sort.Slice(out, func(i, j int) bool { return out[i].To < out[j].To })
			return out, err
		})},
		regionRep(d, "region_failover", region.SubjFailover, region.OpTimeout, func(ctx context.Context, rs region.Regions, r region.FailoverRequest) (region.Failover, error) {
			out, err := rs.Failover(ctx, r)
			if errors.Is(err, platform.ErrConflict) {
				err = refused{err}
			}
			if err == nil && !r.DryRun {
				d.log.Warn("region failover", "topic", r.Topic, "from", out.From, "to", out.To, "promoted_at_seq", out.PromotedAtSeq, "unreplicated", out.Unreplicated, "duplicate_window", out.DuplicateWindow)
			}
			return out, residencyRefusal(err)
		}),
		regionRep(d, "region_failback", region.SubjFailback, region.OpTimeout, func(ctx context.Context, rs region.Regions, r region.FailbackRequest) (region.Failback, error) {
			out, err := rs.Failback(ctx, r)
			if errors.Is(err, platform.ErrConflict) || errors.Is(err, region.ErrUnavailable) {
				err = refused{err}
			}
			if err == nil {
				d.log.Warn("region failback", "topic", r.Topic, "from", out.From, "to", out.To, "copied", out.Copied, "deduplicated", out.Deduplicated)
			}
			return out, err
		}),
		regionRep(d, "residency_report", region.SubjReport, 0, func(ctx context.Context, rs region.Regions, _ struct{}) (region.Report, error) {
			return rs.Report(ctx)
		}),
		regionRep(d, "residency_audit", region.SubjAudit, 0, func(ctx context.Context, rs region.Regions, r region.AuditRequest) ([]region.Refusal, error) {
			if r.Region != "" && !slices.ContainsFunc(rs, func(x region.Region) bool { return x.Name == r.Region }) {
				return nil, fmt.Errorf("%w: no region %q (regions: %s)", control.ErrInvalid, r.Region, strings.Join(regionNames(rs), ", "))
			}
			out := []region.Refusal{}
			for _, reg := range rs {
				if r.Region != "" && reg.Name != r.Region {
					continue
				}
				a, err := rs.Audit(ctx, reg.Name)
				if err != nil {
					return nil, fmt.Errorf("residency audit of region %s: %w", reg.Name, err)
				}
				out = append(out, a...)
			}
			return out, nil
		}),
		regionRep(d, "residency_check", region.SubjCheck, 0, func(ctx context.Context, rs region.Regions, r region.StreamCheckRequest) (struct{}, error) {
			return struct{}{}, residencyRefusal(rs.CheckStream(ctx, r.Region, r.Config))
		}),
	}
}

// regionRep is a region operation's endpoint (timeout: its own request
// timeout, 0 for the service's): fn runs on the regions this platformd
// knows; one that knows only its own region refuses the request as
// invalid, saying how to name the others.
func regionRep[Req, Resp any](d *Daemon, name, subject string, timeout time.Duration, fn func(ctx context.Context, rs region.Regions, req Req) (Resp, error)) control.Endpoint {
	return control.Endpoint{Name: name, Subject: subject, Timeout: timeout, Handle: control.JSON(func(ctx context.Context, r Req) (Resp, error) {
		list, ok := d.regionList()
		if !ok {
			var none Resp
			return none, fmt.Errorf("%w: platformd knows only its own region (mode %s, no regions.peers); region operations need the other regions: list them in regions.peers (mode node, see deploy/docker-regions) or run mode regions (conf/dev-regions.yaml)", control.ErrInvalid, d.cfg.Mode)
		}
		return fn(ctx, list, r)
	})}
}

func regionNames(rs region.Regions) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Name
	}
	return out
}

// residencyRefusal classifies a residency refusal as a conflict (409) and
// keeps its message.
func residencyRefusal(err error) error {
	if errors.Is(err, region.ErrResidency) {
		return refused{err}
	}
	return err
}

// ownResidency refuses, on a daemon that runs one region's node(s), a
// topic or queue resident in another region: its data would live here,
// outside the region it must never leave. Create it through a platformd
// of that region instead.
func (d *Daemon) ownResidency(kind, name, residency string) error {
	if residency == "" || d.region.Name == "" || residency == d.region.Name {
		return nil
	}
	return fmt.Errorf("%w: %s %s: residency %q is not this platformd's region %q: its events would be stored in %s; apply it through a platformd of region %s",
		platform.ErrInvalidSpec, kind, name, residency, d.region.Name, d.region.Name, residency)
}

// RegionClientURLs returns, in mode regions, the client URLs of region
// name's nodes, comma-separated ("" in another mode or for no such
// region): how an operator or a test reaches a region on its own
// connection.
func (d *Daemon) RegionClientURLs(name string) string {
	if d.regions == nil {
		return ""
	}
	f := d.regions.all.Region(name)
	if f == nil {
		return ""
	}
	return f.ClientURLs()
}
