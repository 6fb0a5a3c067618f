package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgplatform/platform/conf"
	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/platform/region"
)

// linkRefreshInterval is how often a mode-node platformd with leafnode
// remotes re-reads the resident topics and queues of its own region and
// of its peers for the link's deny list (besides every stream create or
// update advisory, which triggers a read at once).
const linkRefreshInterval = 5 * time.Second

// linkDebounce is how long a stream create or update advisory waits for
// more before the resident objects are read again.
const linkDebounce = 250 * time.Millisecond

// linkState is the leafnode link's deny list of a mode-node platformd
// that dials other regions (node.leaf.remotes): derived from policy, not
// only from the YAML, by a region.LinkTable. The effective list is the
// union of
//
//   - the configured list (node.leaf.remotes[].deny: extra subjects),
//   - region.CatalogLinkDeny of the daemon's own catalog (topics and
//     queues) and of the resident objects applied through its control API,
//   - region.ResidentLinkDeny of its own region's streams (resident
//     objects another platformd of the region applied),
//   - region.ResidentLinkDeny of every peer region (regions.peers): a
//     resident topic of the other side must not cross either, and only
//     the dialling side's list applies to the link,
//   - region.FixedLinkDeny (the residency gate's forward token, the
//     deliveries of streams' sources).
//
// A peer that cannot be read keeps its last known list (also kept in
// data_dir/regions/link-peers.json across restarts): the list never
// shrinks because a region is unreachable.
type linkState struct {
	configured []string
	file       string // last known peer residents

	mu      sync.Mutex
	applied map[string]bool     // resident names applied through this daemon
	own     []string            // resident names of the own region's streams
	peers   map[string][]string // resident names by peer region, last known
	// pinned is the resident names peer regions asked this platformd to
	// deny before creating them (subjLinkDenyAdd): kept in peers even
	// when a read of the peer does not list them (yet).
	pinned    map[string][]string
	effective []string

	subjects prometheus.Gauge
	updates  prometheus.Counter
	objects  *prometheus.GaugeVec

	kick       chan struct{}
	stop, done chan struct{}
	subs       []*nats.Subscription
}

// startLinkDeny derives the link's deny list, applies it to this node's
// leafnode remotes and keeps it current (see linkState). It runs in mode
// node with remotes only; the listening side (no remotes) has no deny
// list of its own: the dialling side's applies to the link both ways.
func (d *Daemon) startLinkDeny(ctx context.Context) error {
	if err := d.serveLinkDenyAdd(); err != nil {
		return err
	}
	if d.cfg.Mode != conf.ModeNode || len(d.cfg.Node.Leaf.Remotes) == 0 {
		return nil
	}
	var configured []string
	for _, r := range d.cfg.Node.Leaf.Remotes {
		configured = append(configured, r.Deny...)
	}
	ls := &linkState{
		configured: region.MergeDeny(configured),
		file:       filepath.Join(d.cfg.DataDir, "regions", "link-peers.json"),
		applied:    map[string]bool{},
		peers:      map[string][]string{},
		subjects: prometheus.NewGauge(prometheus.GaugeOpts{Name: "platform_region_link_deny_subjects",
			Help: "Subjects on this node's region link deny list (configured, plus derived from the resident topics and queues of every region, plus the residency gate's)."}),
		updates: prometheus.NewCounter(prometheus.CounterOpts{Name: "platform_region_link_deny_updates_total",
			Help: "Times this node's region link deny list changed and was applied (each is a link reconnect)."}),
		objects: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "platform_region_link_denied_resident",
			Help: "Resident topics and queues whose subjects and stream reads are on this node's region link deny list (1), by name and the region that holds them."}, []string{"name", "region"}),
		kick: make(chan struct{}, 1),
		stop: make(chan struct{}),
	}
	if b, err := os.ReadFile(ls.file); err == nil {
		_ = json.Unmarshal(b, &ls.peers)
	}
	if d.peers == nil { // remotes without regions.peers
		own := d.region
		own.EnsureDefaults()
		d.peers = &peersState{list: region.Regions{{Name: own.Name, Domain: own.Domain, JS: d.js}}}
	}
	d.peers.link = ls
	d.reg.MustRegister(ls.subjects, ls.updates, ls.objects)
	// Advisories of stream creates and updates, here and in every peer,
	// trigger a read at once.
	conns := []*nats.Conn{d.nc}
	if d.peers != nil {
		conns = append(conns, d.peers.conns...)
	}
	for _, nc := range conns {
		for _, action := range []string{"CREATED", "UPDATED"} {
			sub, err := nc.Subscribe("$JS.EVENT.ADVISORY.STREAM."+action+".*", func(*nats.Msg) { ls.poke() })
			if err != nil {
				return fmt.Errorf("daemon: link deny list: %w", err)
			}
			ls.subs = append(ls.subs, sub)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := d.refreshLinkDeny(rctx)
	cancel()
	if err != nil {
		return err
	}
	ls.done = make(chan struct{})
	go d.keepLinkDeny()
	return nil
}

func (ls *linkState) poke() {
	select {
	case ls.kick <- struct{}{}:
	default:
	}
}

// keepLinkDeny re-derives the deny list every linkRefreshInterval and at
// every poke until stop.
func (d *Daemon) keepLinkDeny() {
	ls := d.peers.link
	defer close(ls.done)
	tick := time.NewTicker(linkRefreshInterval)
	defer tick.Stop()
	for nextLinkRefresh(ls.stop, tick.C, ls.kick) {
		ctx, cancel := context.WithTimeout(context.Background(), linkRefreshInterval)
		if err := d.refreshLinkDeny(ctx); err != nil {
			d.log.Warn("platformd: region link deny list not updated", "err", err)
		}
		cancel()
	}
}

// nextLinkRefresh waits for the next refresh of a link deny list: a tick,
// or a kick and then linkDebounce more, so that a burst of stream changes
// (a failover, a failback, an apply) is read once. It reports false when
// stop closes first.
func nextLinkRefresh(stop <-chan struct{}, tick <-chan time.Time, kick chan struct{}) bool {
	select {
	case <-stop:
		return false
	case <-tick:
	case <-kick:
		select {
		case <-stop:
			return false
		case <-time.After(linkDebounce):
		}
		select {
		case <-kick:
		default:
		}
	}
	return true
}

// refreshLinkDeny reads the resident objects of the own region and of
// every reachable peer and applies the deny list if it changed. The own
// region unreadable keeps its previous list; so does a peer.
func (d *Daemon) refreshLinkDeny(ctx context.Context) error {
	ls := d.peers.link
	own := ls.ownNames()
	if _, names, err := region.ResidentLinkDeny(ctx, d.js); err == nil {
		own = names
	} else {
		d.log.Warn("platformd: could not read this region's resident topics and queues for the link deny list; keeping the last known", "err", err)
	}
	peers := map[string][]string{}
	changedPeers := false
	{
		for i, r := range d.peers.list[1:] {
			if !d.peers.conns[i].IsConnected() {
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			_, names, err := region.ResidentLinkDeny(pctx, r.JS)
			cancel()
			if err != nil {
				d.log.Warn("platformd: could not read peer region's resident topics and queues for the link deny list; keeping the last known", "region", r.Name, "err", err)
				continue
			}
			peers[r.Name] = names
		}
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.own = own
	for name, names := range peers {
		if len(ls.pinned[name]) > 0 {
			names = sortedUnion(names, ls.pinned[name])
		}
		if !slices.Equal(ls.peers[name], names) {
			ls.peers[name] = names
			changedPeers = true
		}
	}
	if changedPeers {
		d.savePeersLocked()
	}
	return d.applyLinkDenyLocked()
}

func (ls *linkState) ownNames() []string {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.own
}

// applyLinkDenyLocked computes the effective deny list and, if it changed,
// applies it to the node's remotes (a link reconnect), logs it and
// updates the metrics. ls.mu is held.
func (d *Daemon) applyLinkDenyLocked() error {
	ls := d.peers.link
	tab := region.LinkTable{Configured: ls.configured}
	tab.AddCatalog(d.cfg.Catalog)
	for name := range ls.applied {
		tab.Add(name, d.region.Name)
	}
	for _, name := range ls.own {
		tab.Add(name, d.region.Name)
	}
	for _, peer := range slices.Sorted(maps.Keys(ls.peers)) {
		for _, name := range ls.peers[peer] {
			tab.Add(name, peer)
		}
	}
	eff := tab.Deny()
	if ls.effective != nil && slices.Equal(eff, ls.effective) {
		return nil
	}
	for _, n := range d.nodes {
		// A node started with this list already (presetLinkDeny) is
		// not reloaded: that would be a needless link reconnect.
		if cur := n.Config().Leaf.Remotes; len(cur) > 0 && sameDeny(cur, eff) {
			continue
		}
		if err := n.SetLeafDeny(eff); err != nil {
			return fmt.Errorf("daemon: apply the region link deny list: %w", err)
		}
	}
	ls.effective = eff
	ls.updates.Inc()
	ls.subjects.Set(float64(len(eff)))
	ls.objects.Reset()
	names := slices.Sorted(maps.Keys(tab.Residents))
	for _, name := range names {
		ls.objects.WithLabelValues(name, tab.Residents[name]).Set(1)
	}
	d.log.Info("platformd: region link deny list applied", "subjects", len(eff), "configured", len(ls.configured), "resident", strings.Join(names, ","), "deny", strings.Join(eff, " "))
	return nil
}

// addLinkResident puts a resident topic or queue about to be applied
// through this daemon's control API on the link's deny list first (mode
// node with remotes; a no-op otherwise), so none of its events can cross
// in the meantime.
func (d *Daemon) addLinkResident(name string) error {
	return d.addLinkResidents(name)
}

// addLinkResidents is addLinkResident of several entries (names, or the
// stream and subject entries of region.ResidentDeny) in one link update.
func (d *Daemon) addLinkResidents(names ...string) error {
	ls := d.linkState()
	if ls == nil {
		return nil
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	changed := false
	for _, name := range names {
		if !ls.applied[name] {
			ls.applied[name] = true
			changed = true
		}
	}
	if !changed {
		return nil
	}
	return d.applyLinkDenyLocked()
}

// LinkDeny returns the effective deny list of this node's region link in
// mode node with leafnode remotes (nil otherwise).
func (d *Daemon) LinkDeny() []string {
	ls := d.linkState()
	if ls == nil {
		return nil
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return slices.Clone(ls.effective)
}

// sameDeny reports whether every remote denies exactly deny.
func sameDeny(remotes []embeddednats.LeafRemote, deny []string) bool {
	for _, r := range remotes {
		if !slices.Equal(r.Deny, deny) {
			return false
		}
	}
	return true
}

// presetLinkDeny returns l with the deny list of every remote set to the
// one platformd can derive before its node starts (mode node with
// remotes): the configured subjects, the resident topics and queues of
// its catalog and the peers' last known resident objects
// (data_dir/regions/link-peers.json), and the gate's forward subject. So
// the link never comes up without them; startLinkDeny then adds what it
// reads from the regions. l's remotes are copied (the configuration's
// own list stays the configured one). startNodes calls it before
// creating the node.
func (d *Daemon) presetLinkDeny(l embeddednats.Leaf) embeddednats.Leaf {
	if d.cfg.Mode != conf.ModeNode || len(l.Remotes) == 0 {
		return l
	}
	var tab region.LinkTable
	for _, r := range l.Remotes {
		tab.Configured = append(tab.Configured, r.Deny...)
	}
	tab.AddCatalog(d.cfg.Catalog)
	peers := map[string][]string{}
	if b, err := os.ReadFile(filepath.Join(d.cfg.DataDir, "regions", "link-peers.json")); err == nil {
		_ = json.Unmarshal(b, &peers)
	}
	for _, peer := range slices.Sorted(maps.Keys(peers)) {
		for _, name := range peers[peer] {
			tab.Add(name, peer)
		}
	}
	eff := tab.Deny()
	l.Remotes = slices.Clone(l.Remotes)
	for i := range l.Remotes {
		l.Remotes[i].Deny = slices.Clone(eff)
	}
	return l
}

// linkState is the daemon's linkState (nil: no leafnode remotes in mode
// node).
func (d *Daemon) linkState() *linkState {
	if d.peers == nil {
		return nil
	}
	return d.peers.link
}

func (d *Daemon) closeLinkDeny() {
	ls := d.linkState()
	if ls == nil {
		return
	}
	for _, s := range ls.subs {
		_ = s.Unsubscribe()
	}
	select {
	case <-ls.stop:
	default:
		close(ls.stop)
		if ls.done != nil {
			<-ls.done
		}
	}
}
