package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgplatform/platform/conf"
	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/platform"
)

// peersState is a mode-node daemon's view of the installation's regions
// (regions.peers): its own region first, on the daemon's admin connection,
// then each peer on an admin connection of its own to that region's client
// URLs — never through the leafnode link, so a failover works with the
// link cut and a failback reads each region where it is.
type peersState struct {
	conns []*nats.Conn
	list  platform.Regions
	// link is the region link's deny list of a node with leafnode
	// remotes (nil otherwise; see linkState).
	link *linkState

	// stop ends the group position recorder; done is closed when it has.
	stop, done chan struct{}

	// denySub answers subjLinkDenyAdd (serveLinkDenyAdd).
	denySub *nats.Subscription
	// confirmed is the resident names every peer region has confirmed
	// on its link deny list (addPeerResident).
	mu        sync.Mutex
	confirmed map[string]bool
	// catalogConfirmed counts the catalog's resident objects every peer
	// confirmed before the catalog was reconciled (denyCatalogAtPeers).
	catalogConfirmed int
}

// startPeers connects, in mode node with regions.peers, to every peer
// region and builds the platform.Regions the control API's region
// operations run on. A peer that does not answer yet does not stop the
// daemon (a failover is exactly the case where the origin is gone): its
// connection keeps retrying, and the operations report the region as
// unreachable meanwhile. A creds file that is missing or readable by
// others is refused at start.
func (d *Daemon) startPeers(ctx context.Context) error {
	peers := d.cfg.Regions.Peers
	if d.cfg.Mode != conf.ModeNode || len(peers) == 0 || d.peers != nil {
		return nil // d.peers set: started early (denyCatalogAtPeers)
	}
	own := d.region
	own.EnsureDefaults()
	ps := &peersState{list: platform.Regions{{Name: own.Name, Domain: own.Domain, JS: d.js}}}
	d.peers = ps
	for i, p := range peers {
		nc, err := d.connectPeer(p)
		if err != nil {
			return fmt.Errorf("daemon: regions.peers[%d] (%s): %w", i, p.Name, err)
		}
		ps.conns = append(ps.conns, nc)
		js, err := jetstream.New(nc)
		if err != nil {
			return fmt.Errorf("daemon: regions.peers[%d] (%s): %w", i, p.Name, err)
		}
		ps.list = append(ps.list, platform.Region{Name: p.Name, Domain: p.Domain, JS: js})
		if !nc.IsConnected() {
			d.log.Warn("platformd: peer region not reachable yet; retrying in the background", "region", p.Name, "urls", strings.Join(p.URLs, ","))
		}
	}
	d.reg.MustRegister(platform.NewMirrorCollector(func() platform.Regions { return ps.list }))
	ps.stop, ps.done = make(chan struct{}), make(chan struct{})
	go recordPositions(ps.list, positionInterval, ps.stop, ps.done)
	d.log.Info("platformd: region operations enabled", "region", own.Name, "peers", len(peers))
	return nil
}

// connectPeer opens the admin connection to peer region p: with p.Creds,
// or else as this installation's admin user (regions of one installation
// share the trust). It retries in the background when p is unreachable.
func (d *Daemon) connectPeer(p conf.PeerRegion) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name("platformd-peer-" + p.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.RetryOnFailedConnect(true),
		nats.Timeout(2 * time.Second),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if nc.IsClosed() {
				return // the daemon is stopping
			}
			d.log.Warn("platformd: lost the connection to peer region", "region", p.Name, "err", err)
		}),
		nats.ReconnectHandler(func(*nats.Conn) {
			d.log.Info("platformd: reconnected to peer region", "region", p.Name)
		}),
	}
	urls := strings.Join(p.URLs, ",")
	if p.Creds == "" {
		return embeddednats.ConnectAdmin(d.trust, urls, opts...)
	}
	if err := checkCredsFile(p.Creds); err != nil {
		return nil, err
	}
	return nats.Connect(urls, append(opts, nats.UserCredentials(p.Creds))...)
}

// checkCredsFile refuses a creds file that does not exist or that others
// than its owner can read (it holds a user's private seed: 0600).
func checkCredsFile(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("creds: %w", err)
	}
	if fi.IsDir() {
		return fmt.Errorf("creds: %s is a directory, want a .creds file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("creds: %s is readable by others (mode %04o); it holds a private seed: chmod 600 it", path, perm)
	}
	return nil
}

// recordPositions runs list.RecordPositions every interval until stop is
// closed, then closes done.
func recordPositions(list platform.Regions, interval time.Duration, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			ctx, cancel := context.WithTimeout(context.Background(), interval)
			_, _ = list.RecordPositions(ctx)
			cancel()
		}
	}
}

// closePeers stops the position recorder and closes the peer connections.
func (d *Daemon) closePeers() {
	ps := d.peers
	if ps == nil {
		return
	}
	d.closeLinkDeny()
	if ps.denySub != nil {
		_ = ps.denySub.Unsubscribe()
	}
	if ps.stop != nil {
		select {
		case <-ps.stop:
		default:
			close(ps.stop)
			<-ps.done
		}
	}
	for _, nc := range ps.conns {
		nc.Close()
	}
}

// regionList is the regions the control API's region operations run on:
// every region in mode regions, this node's and its peers' in mode node.
func (d *Daemon) regionList() (platform.Regions, bool) {
	switch {
	case d.regions != nil:
		return d.regions.list, true
	case d.peers != nil && len(d.peers.list) > 1:
		return d.peers.list, true
	}
	return nil, false
}

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
// only from the YAML. The effective list is the union of
//
//   - the configured list (node.leaf.remotes[].deny: extra subjects),
//   - platform.CatalogLinkDeny of the daemon's own catalog (topics and
//     queues) and of the resident objects applied through its control API,
//   - platform.ResidentLinkDeny of its own region's streams (resident
//     objects another platformd of the region applied),
//   - platform.ResidentLinkDeny of every peer region (regions.peers): a
//     resident topic of the other side must not cross either, and only
//     the dialling side's list applies to the link,
//   - platform.GateLinkDeny (the residency gate's forward token).
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
		configured: platform.MergeDeny(configured),
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
		d.peers = &peersState{list: platform.Regions{{Name: own.Name, Domain: own.Domain, JS: d.js}}}
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
	for {
		select {
		case <-ls.stop:
			return
		case <-tick.C:
		case <-ls.kick:
			// A burst of stream changes (a failover, a failback, an
			// apply) is read once.
			select {
			case <-ls.stop:
				return
			case <-time.After(linkDebounce):
			}
			select {
			case <-ls.kick:
			default:
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), linkRefreshInterval)
		if err := d.refreshLinkDeny(ctx); err != nil {
			d.log.Warn("platformd: region link deny list not updated", "err", err)
		}
		cancel()
	}
}

// refreshLinkDeny reads the resident objects of the own region and of
// every reachable peer and applies the deny list if it changed. The own
// region unreadable keeps its previous list; so does a peer.
func (d *Daemon) refreshLinkDeny(ctx context.Context) error {
	ls := d.peers.link
	own := ls.ownNames()
	if _, names, err := platform.ResidentLinkDeny(ctx, d.js); err == nil {
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
			_, names, err := platform.ResidentLinkDeny(pctx, r.JS)
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
	where := map[string]string{}
	var derived []string
	add := func(name, region string) {
		if _, ok := where[name]; !ok {
			where[name] = region
			derived = append(derived, platform.ResidentDeny(name)...)
		}
	}
	for _, t := range d.cfg.Catalog.Topics {
		if t.Residency != "" {
			add(t.Name, t.Residency)
		}
	}
	for _, q := range d.cfg.Catalog.Queues {
		if q.Residency != "" {
			add(q.Name, q.Residency)
		}
	}
	for name := range ls.applied {
		add(name, d.region.Name)
	}
	for _, name := range ls.own {
		add(name, d.region.Name)
	}
	for _, region := range slices.Sorted(maps.Keys(ls.peers)) {
		for _, name := range ls.peers[region] {
			add(name, region)
		}
	}
	// Catalog order is a map's: sort the derived part for a stable list.
	sort.Strings(derived)
	eff := platform.MergeDeny(ls.configured, derived, []string{platform.GateLinkDeny})
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
	names := slices.Sorted(maps.Keys(where))
	for _, name := range names {
		ls.objects.WithLabelValues(name, where[name]).Set(1)
	}
	d.log.Info("platformd: region link deny list applied", "subjects", len(eff), "configured", len(ls.configured), "resident", strings.Join(names, ","), "deny", strings.Join(eff, " "))
	return nil
}

// addLinkResident puts a resident topic or queue about to be applied
// through this daemon's control API on the link's deny list first (mode
// node with remotes; a no-op otherwise), so none of its events can cross
// in the meantime.
func (d *Daemon) addLinkResident(name string) error {
	ls := d.linkState()
	if ls == nil {
		return nil
	}
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.applied[name] {
		return nil
	}
	ls.applied[name] = true
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
	var configured []string
	for _, r := range l.Remotes {
		configured = append(configured, r.Deny...)
	}
	var derived []string
	for _, t := range d.cfg.Catalog.Topics {
		if t.Residency != "" {
			derived = append(derived, platform.ResidentDeny(t.Name)...)
		}
	}
	for _, q := range d.cfg.Catalog.Queues {
		if q.Residency != "" {
			derived = append(derived, platform.ResidentDeny(q.Name)...)
		}
	}
	peers := map[string][]string{}
	if b, err := os.ReadFile(filepath.Join(d.cfg.DataDir, "regions", "link-peers.json")); err == nil {
		_ = json.Unmarshal(b, &peers)
	}
	for _, names := range peers {
		for _, n := range names {
			derived = append(derived, platform.ResidentDeny(n)...)
		}
	}
	sort.Strings(derived)
	eff := platform.MergeDeny(platform.MergeDeny(configured), derived, []string{platform.GateLinkDeny})
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

// subjLinkDenyAdd is the request a mode-node platformd whose region
// listens for the region link (node.leaf.port) sends, over its
// regions.peers connection, to every platformd of each peer region before
// it creates a resident topic or queue: only the dialling side's deny list
// applies to the link, so the dialling nodes must deny the object's
// subjects first. It is a plain subscription (no queue group): every
// platformd of the peer region answers (linkDenyAddReply), and the
// requester waits for all of them.
const subjLinkDenyAdd = control.SubjectPrefix + ".region.link.deny.add"

// linkDenyConfirm bounds how long a listening platformd waits for every
// platformd of a peer region to confirm a resident object on its link
// deny list.
const linkDenyConfirm = 10 * time.Second

// linkDenyAddRequest names the resident topics or queues of region that a
// dialling platformd must deny on its link (platform.ResidentDeny).
type linkDenyAddRequest struct {
	Region string   `json:"region"`
	Names  []string `json:"names"`
}

// linkDenyAddReply is one platformd's answer: its node's name, whether it
// dials the link (only then does it hold a deny list), and an error.
type linkDenyAddReply struct {
	Server   string `json:"server"`
	Dialling bool   `json:"dialling"`
	Subjects int    `json:"subjects,omitempty"`
	Error    string `json:"error,omitempty"`
}

// serveLinkDenyAdd answers subjLinkDenyAdd on every mode-node platformd
// (see addPeerResident). A dialling one puts the names on its link deny
// list (kept in data_dir/regions/link-peers.json, never dropped while it
// runs), applies it and answers once the link's connections made with
// the previous list are gone (reconnected with the new one, or down).
func (d *Daemon) serveLinkDenyAdd() error {
	if d.cfg.Mode != conf.ModeNode {
		return nil
	}
	if d.peers == nil {
		own := d.region
		own.EnsureDefaults()
		d.peers = &peersState{list: platform.Regions{{Name: own.Name, Domain: own.Domain, JS: d.js}}}
	}
	sub, err := d.nc.Subscribe(subjLinkDenyAdd, func(m *nats.Msg) {
		rep := d.linkDenyAdd(m.Data)
		b, _ := json.Marshal(rep)
		_ = m.Respond(b)
	})
	if err != nil {
		return fmt.Errorf("daemon: serve %s: %w", subjLinkDenyAdd, err)
	}
	d.peers.denySub = sub
	return nil
}

func (d *Daemon) linkDenyAdd(body []byte) linkDenyAddReply {
	var rep linkDenyAddReply
	for _, n := range d.nodes {
		if s := n.Server(); s != nil {
			rep.Server = s.Name()
			break
		}
	}
	var req linkDenyAddRequest
	if err := json.Unmarshal(body, &req); err != nil {
		rep.Error = fmt.Sprintf("bad %s request: %v", subjLinkDenyAdd, err)
		return rep
	}
	if req.Region == "" || len(req.Names) == 0 {
		rep.Error = fmt.Sprintf("bad %s request: want a region and at least one name", subjLinkDenyAdd)
		return rep
	}
	for _, n := range req.Names {
		if n == "" || strings.ContainsAny(n, " \t\r\n*>") {
			rep.Error = fmt.Sprintf("bad %s request: %q is not a topic or queue name", subjLinkDenyAdd, n)
			return rep
		}
	}
	ls := d.linkState()
	if ls == nil {
		return rep // not dialling: nothing of ours applies to the link
	}
	rep.Dialling = true
	ls.mu.Lock()
	before := d.remoteDeny()
	if ls.pinned == nil {
		ls.pinned = map[string][]string{}
	}
	ls.pinned[req.Region] = sortedUnion(ls.pinned[req.Region], req.Names)
	ls.peers[req.Region] = sortedUnion(ls.peers[req.Region], req.Names)
	d.savePeersLocked()
	old := d.leafConnIDs()
	err := d.applyLinkDenyLocked()
	changed := !slices.Equal(before, d.remoteDeny())
	rep.Subjects = len(ls.effective)
	ls.mu.Unlock()
	if err != nil {
		rep.Error = err.Error()
		return rep
	}
	if changed {
		// The reload closes the link's connections made with the old
		// list; wait until none is left (a new one carries the new list).
		deadline := time.Now().Add(5 * time.Second)
		for d.anyLeafConn(old) {
			if time.Now().After(deadline) {
				rep.Error = "the link's connection made with the previous deny list is still open after 5s"
				return rep
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	d.log.Info("platformd: peer region's resident objects denied on the region link before their creation", "region", req.Region, "names", strings.Join(req.Names, ","), "subjects", rep.Subjects)
	return rep
}

// savePeersLocked keeps ls.peers in data_dir/regions/link-peers.json (read
// at start by presetLinkDeny and startLinkDeny). ls.mu is held.
func (d *Daemon) savePeersLocked() {
	ls := d.peers.link
	b, err := json.Marshal(ls.peers)
	if err == nil {
		if err = os.MkdirAll(filepath.Dir(ls.file), 0o700); err == nil {
			err = embeddednats.WriteFileAtomic(ls.file, b, 0o600)
		}
	}
	if err != nil {
		d.log.Warn("platformd: could not keep the peers' resident topics and queues", "file", ls.file, "err", err)
	}
}

// leafConnIDs is the ids of this platformd's nodes' solicited leafnode
// connections (the region link).
func (d *Daemon) leafConnIDs() map[uint64]bool {
	ids := map[uint64]bool{}
	for _, n := range d.nodes {
		s := n.Server()
		if s == nil {
			continue
		}
		lz, err := s.Leafz(nil)
		if err != nil {
			continue
		}
		for _, l := range lz.Leafs {
			if l.IsSpoke {
				ids[l.ID] = true
			}
		}
	}
	return ids
}

// remoteDeny is the deny list the first leafnode remote of this
// platformd's nodes runs with (a copy).
func (d *Daemon) remoteDeny() []string {
	for _, n := range d.nodes {
		if r := n.Config().Leaf.Remotes; len(r) > 0 {
			return slices.Clone(r[0].Deny)
		}
	}
	return nil
}

func (d *Daemon) anyLeafConn(ids map[uint64]bool) bool {
	for id := range d.leafConnIDs() {
		if ids[id] {
			return true
		}
	}
	return false
}

func sortedUnion(a, b []string) []string {
	out := platform.MergeDeny(a, b)
	sort.Strings(out)
	return out
}

// addPeerResident is, on a mode-node platformd whose region listens for
// the region link (node.leaf.port), the step before a resident topic or
// queue is created through its control API: every platformd of every
// peer region (regions.peers) must confirm on subjLinkDenyAdd, the
// dialling ones once their link deny list holds the object's subjects
// (only the dialling side's list applies to the link). A peer region that
// is not connected, or any of its platformds (one per node of its meta
// group) that does not confirm within linkDenyConfirm, refuses the create
// (a conflict naming the peer and what to do); nothing is changed.
// Without regions.peers the listening side cannot reach the dialling
// side: the create goes ahead with a warning.
func (d *Daemon) addPeerResident(ctx context.Context, kind, name string) error {
	if d.cfg.Mode != conf.ModeNode || d.cfg.Node.Leaf.Port == 0 {
		return nil
	}
	if d.peers == nil || len(d.peers.conns) == 0 {
		d.log.Warn("platformd: resident object created on the listening side of the region link without regions.peers: the dialling side denies it only once it learns of it", "kind", kind, "name", name)
		return nil
	}
	d.peers.mu.Lock()
	done := d.peers.confirmed[name]
	d.peers.mu.Unlock()
	if done {
		return nil
	}
	own := d.region
	own.EnsureDefaults()
	body, _ := json.Marshal(linkDenyAddRequest{Region: own.Name, Names: []string{name}})
	for i, p := range d.cfg.Regions.Peers {
		if err := confirmPeerDeny(ctx, d.peers.conns[i], body); err != nil {
			return refused{fmt.Errorf("%w: resident %s %s not created: peer region %s (regions.peers) did not confirm that its nodes, which may dial this region's link, deny it: %v. Only the dialling side's deny list applies to the link, so it must hold %s before it exists here; restore %s's platformds and the connection to them (%s) and apply again, nothing was changed",
				platform.ErrConflict, kind, name, p.Name, err, name, p.Name, strings.Join(p.URLs, ","))}
		}
	}
	d.peers.mu.Lock()
	if d.peers.confirmed == nil {
		d.peers.confirmed = map[string]bool{}
	}
	d.peers.confirmed[name] = true
	d.peers.mu.Unlock()
	return nil
}

// confirmPeerDeny sends body on subjLinkDenyAdd to a peer region on nc
// and waits, within linkDenyConfirm, for a confirmation from the
// platformd of every node of its meta group (control API status).
func confirmPeerDeny(ctx context.Context, nc *nats.Conn, body []byte) error {
	if !nc.IsConnected() {
		return fmt.Errorf("not connected (%s)", nc.Status())
	}
	ctx, cancel := context.WithTimeout(ctx, linkDenyConfirm)
	defer cancel()
	var st control.Status
	if err := control.Call(ctx, nc, control.SubjStatus, struct{}{}, &st); err != nil {
		return fmt.Errorf("its status: %w", err)
	}
	want := map[string]bool{st.Server: true}
	for _, n := range st.Nodes {
		want[n.Name] = true
	}
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return err
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(subjLinkDenyAdd, inbox, body); err != nil {
		return err
	}
	for len(want) > 0 {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return fmt.Errorf("no confirmation within %s from %s (%v)", linkDenyConfirm, strings.Join(slices.Sorted(maps.Keys(want)), ", "), err)
		}
		if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
			return errors.New("no platformd answers " + subjLinkDenyAdd + " (an older version?)")
		}
		var rep linkDenyAddReply
		if err := json.Unmarshal(m.Data, &rep); err != nil {
			return fmt.Errorf("bad reply to %s: %v", subjLinkDenyAdd, err)
		}
		if rep.Error != "" {
			return fmt.Errorf("%s: %s", rep.Server, rep.Error)
		}
		delete(want, rep.Server)
	}
	return nil
}

// denyCatalogAtPeers is addPeerResident for the resident topics and queues
// of the catalog, before it is reconciled at start (mode node, the
// listening side of the region link, with regions.peers): every reachable
// peer region's platformds put them on their link deny list first. Unlike
// an apply through the control API, an unreachable peer does not stop the
// start (a region's first start often precedes its peers'): it is logged,
// and that peer's platformd reads the catalog's resident objects from
// this region's streams once it reaches them (linkState). It opens the
// peer connections (startPeers) early for this.
func (d *Daemon) denyCatalogAtPeers(ctx context.Context) error {
	if d.cfg.Mode != conf.ModeNode || d.cfg.Node.Leaf.Port == 0 || len(d.cfg.Regions.Peers) == 0 {
		return nil
	}
	var kinds, names []string
	for _, name := range slices.Sorted(maps.Keys(d.cfg.Catalog.Topics)) {
		if d.cfg.Catalog.Topics[name].Residency != "" {
			kinds, names = append(kinds, "topic"), append(names, name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(d.cfg.Catalog.Queues)) {
		if d.cfg.Catalog.Queues[name].Residency != "" {
			kinds, names = append(kinds, "queue"), append(names, name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	if err := d.startPeers(ctx); err != nil {
		return err
	}
	// The peer connections retry in the background: give them a moment.
	deadline := time.Now().Add(2 * time.Second)
	for _, nc := range d.peers.conns {
		for !nc.IsConnected() && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
	}
	for i, name := range names {
		if err := d.addPeerResident(ctx, kinds[i], name); err != nil {
			d.log.Warn("platformd: a peer region did not confirm a catalog resident object on its link deny list before the catalog is reconciled; it denies it once it reads this region", "kind", kinds[i], "name", name, "err", err)
			continue
		}
		d.peers.mu.Lock()
		d.peers.catalogConfirmed++
		d.peers.mu.Unlock()
	}
	return nil
}

// CatalogDeniedAtPeers is how many of the catalog's resident topics and
// queues every peer region confirmed on its link deny list before the
// catalog was reconciled at start (mode node, listening side of the link;
// 0 otherwise).
func (d *Daemon) CatalogDeniedAtPeers() int {
	if d.peers == nil {
		return 0
	}
	d.peers.mu.Lock()
	defer d.peers.mu.Unlock()
	return d.peers.catalogConfirmed
}
