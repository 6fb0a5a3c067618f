package daemon

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/conf"
	"github.com/msgplatform/platform/embeddednats"
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

	// stop ends the group position recorder; done is closed when it has.
	stop, done chan struct{}
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
	if d.cfg.Mode != conf.ModeNode || len(peers) == 0 {
		return nil
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
	case d.peers != nil:
		return d.peers.list, true
	}
	return nil, false
}
