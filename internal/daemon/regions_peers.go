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

	"github.com/msgplatform/platform/conf"
	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/gather"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/region"
)

// peersState is a mode-node daemon's view of the installation's regions
// (regions.peers): its own region first, on the daemon's admin connection,
// then each peer on an admin connection of its own to that region's client
// URLs — never through the leafnode link, so a failover works with the
// link cut and a failback reads each region where it is.
type peersState struct {
	conns []*nats.Conn
	list  region.Regions
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
// region and builds the region.Regions the control API's region
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
	ps := &peersState{list: region.Regions{{Name: own.Name, Domain: own.Domain, JS: d.js}}}
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
		ps.list = append(ps.list, region.Region{Name: p.Name, Domain: p.Domain, JS: js})
		if !nc.IsConnected() {
			d.log.Warn("platformd: peer region not reachable yet; retrying in the background", "region", p.Name, "urls", strings.Join(p.URLs, ","))
		}
	}
	d.reg.MustRegister(region.NewMirrorCollector(func() region.Regions { return ps.list }))
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
	if tc, err := p.TLS.Client(""); err != nil {
		return nil, err
	} else if tc != nil {
		opts = append(opts, nats.Secure(tc))
	}
	urls := strings.Join(p.URLs, ",")
	if p.Creds == "" {
		return embeddednats.ConnectAdmin(d.trust, urls, opts...)
	}
	if err := checkCredsFile(p.Creds); err != nil {
		return nil, err
	}
	return embeddednats.Connect(d.trust, urls, append(opts, nats.UserCredentials(p.Creds))...)
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
func recordPositions(list region.Regions, interval time.Duration, stop <-chan struct{}, done chan<- struct{}) {
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
func (d *Daemon) regionList() (region.Regions, bool) {
	switch {
	case d.regions != nil:
		return d.regions.list, true
	case d.peers != nil && len(d.peers.list) > 1:
		return d.peers.list, true
	}
	return nil, false
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
// dialling platformd must deny on its link (region.ResidentDeny).
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
		d.peers = &peersState{list: region.Regions{{Name: own.Name, Domain: own.Domain, JS: d.js}}}
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
	out := region.MergeDeny(a, b)
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
	_, err := gather.Collect(ctx, nc, subjLinkDenyAdd, body, gather.Options{Want: len(want), Wait: linkDenyConfirm}, func(m *nats.Msg) (bool, error) {
		var rep linkDenyAddReply
		if err := json.Unmarshal(m.Data, &rep); err != nil {
			return false, fmt.Errorf("bad reply to %s: %v", subjLinkDenyAdd, err)
		}
		if rep.Error != "" {
			return false, fmt.Errorf("%s: %s", rep.Server, rep.Error)
		}
		counts := want[rep.Server]
		delete(want, rep.Server)
		return counts, nil
	})
	switch {
	case errors.Is(err, gather.ErrNoResponders):
		return errors.New("no platformd answers " + subjLinkDenyAdd + " (an older version?)")
	case err != nil:
		return err
	case len(want) > 0:
		return fmt.Errorf("no confirmation within %s from %s", linkDenyConfirm, strings.Join(slices.Sorted(maps.Keys(want)), ", "))
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
