package embeddednats

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/msgplatform/platform/internal/tlsconf"
	"github.com/msgplatform/platform/internal/validate"
)

// Leaf is how a node links to other regions through leafnodes. Regions are
// separate clusters with separate JetStream domains (independent meta
// groups: each stays writable without the other); a leafnode link carries
// what policy lets cross, in the platform account only.
type Leaf struct {
	// Host and Port are the leafnode listener other regions dial (Port 0:
	// none; -1: pick a free port).
	Host string `mapstructure:"host"`
	Port int    `mapstructure:"port"`
	// Remotes are the leafnode listeners of other regions this node dials.
	Remotes []LeafRemote `mapstructure:"remotes"`
	// PingInterval is how often the node pings its connections (0: the
	// nats-server default, 2m). A link whose peer vanished without closing
	// it (a cut network) is dropped after two unanswered pings and then
	// redialled, so a short interval (e.g. 2s) bounds how long a cut link
	// stays "up" without carrying anything. It applies to every
	// connection of the node: nats-server has one ping interval for
	// clients and leafnodes.
	PingInterval time.Duration `mapstructure:"ping_interval"`
	// TLS of the links: the listener's certificate (with TLS.Verify a
	// dialling region must present one of TLS.CAFile), and for Remotes
	// the CA the other region's listener is verified against and the
	// certificate presented to it. Links authenticate with link user
	// credentials either way.
	TLS tlsconf.Config `mapstructure:"tls"`
}

// LeafRemote is one link this node dials.
type LeafRemote struct {
	// URLs are the nats-leaf://host:port listeners of the other region.
	URLs []string `mapstructure:"urls"`
	// Credentials is the link user's .creds file; "" mints a link user of
	// the platform account from the trust material (StoreDir/link/).
	Credentials string `mapstructure:"credentials"`
	// Deny are subjects that never cross this link, in either direction
	// (applied as both deny_imports and deny_exports): the residency
	// policy's subjects, see ResidentDeny.
	Deny []string `mapstructure:"deny"`
}

// Enabled reports whether the node listens for or dials leafnode links.
func (l Leaf) Enabled() bool { return l.Port != 0 || len(l.Remotes) > 0 }

func validateLeaf(p *validate.Problems, key string, l Leaf) {
	if l.PingInterval < 0 {
		p.Addf(key+".ping_interval", "must be >= 0, got %s", l.PingInterval)
	}
	if l.Port != 0 {
		l.TLS.ValidateServer(p, key+".tls")
	} else if len(l.Remotes) > 0 {
		l.TLS.ValidateClient(p, key+".tls")
	}
	if l.Port != 0 {
		validatePort(p, key+".port", l.Port)
		if net.ParseIP(l.Host) == nil && l.Host != "localhost" {
			p.Addf(key+".host", "must be an IP address or localhost, got %q", l.Host)
		}
	}
	for i, r := range l.Remotes {
		rk := fmt.Sprintf("%s.remotes[%d]", key, i)
		if len(r.URLs) == 0 {
			p.Addf(rk+".urls", "must name at least one nats-leaf://host:port URL of the other region")
		}
		for j, u := range r.URLs {
			if !strings.HasPrefix(u, "nats-leaf://") && !strings.HasPrefix(u, "nats://") {
				p.Addf(fmt.Sprintf("%s.urls[%d]", rk, j), "must be a nats-leaf://host:port URL, got %q", u)
			}
		}
		for j, s := range r.Deny {
			if s == "" || strings.ContainsAny(s, " \t") {
				p.Addf(fmt.Sprintf("%s.deny[%d]", rk, j), "must be a subject, got %q", s)
			}
		}
	}
}

// leafOptions adds the node's leafnode listener and remotes to opts. A
// remote without credentials gets a freshly minted link user of the
// platform account (its .creds under StoreDir/link/, named by gen so that
// a changed deny list is a new remote on reload). A node with no_advertise
// does not gossip its region's leafnode addresses to the other region
// either: those are addresses of its own network (in Docker, container
// addresses the other region may not reach), and the dialling side lists
// every listener in its remote's urls.
func (n *Node) leafOptions(opts *server.Options, gen int) error {
	l := n.cfg.Leaf
	if l.PingInterval > 0 {
		opts.PingInterval = l.PingInterval
	}
	if l.Port != 0 {
		opts.LeafNode.Host = l.Host
		if opts.LeafNode.Host == "" {
			opts.LeafNode.Host = n.cfg.Host
		}
		opts.LeafNode.Port = l.Port
		opts.LeafNode.NoAdvertise = n.cfg.NoAdvertise
		if n.tls.leaf != nil {
			opts.LeafNode.TLSConfig, opts.LeafNode.TLSTimeout = n.tls.leaf, tlsTimeout
		}
	}
	for i, r := range l.Remotes {
		ro := &server.RemoteLeafOpts{
			LocalAccount: n.trust.AdminAccount(),
			Credentials:  r.Credentials,
			DenyImports:  append([]string(nil), r.Deny...),
			DenyExports:  append([]string(nil), r.Deny...),
		}
		if n.tls.leafRemote != nil {
			ro.TLS, ro.TLSConfig, ro.TLSTimeout = true, n.tls.leafRemote, tlsTimeout
		}
		for _, s := range r.URLs {
			u, err := url.Parse(s)
			if err != nil {
				return fmt.Errorf("embeddednats: leaf remote %q: %w", s, err)
			}
			ro.URLs = append(ro.URLs, u)
		}
		if ro.Credentials == "" {
			creds, err := n.trust.LinkCreds()
			if err != nil {
				return err
			}
			dir := filepath.Join(n.cfg.StoreDir, "link")
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return fmt.Errorf("embeddednats: link creds dir: %w", err)
			}
			ro.Credentials = filepath.Join(dir, "remote"+strconv.Itoa(i)+"-"+strconv.Itoa(gen)+".creds")
			if err := WriteFileAtomic(ro.Credentials, creds, 0o600); err != nil {
				return err
			}
		}
		opts.LeafNode.Remotes = append(opts.LeafNode.Remotes, ro)
	}
	return nil
}

// LinkCreds mints a user of the platform account for a region link and
// returns its .creds file contents.
func (t *Trust) LinkCreds() ([]byte, error) {
	sk, err := nkeys.FromSeed([]byte(t.AdminAccountSigningSeed))
	if err != nil {
		return nil, fmt.Errorf("embeddednats: admin signing key: %w", err)
	}
	seed, token, err := newUser("region-link", sk, t.AdminAccount())
	if err != nil {
		return nil, err
	}
	return jwt.FormatUserConfig(token, []byte(seed))
}

// SetLeafDeny replaces the deny list of every leafnode remote of a running
// node (the residency policy changed). The server reloads its options; the
// link reconnects once (a second or so without cross-region traffic;
// mirrors resume where they stopped).
func (n *Node) SetLeafDeny(deny []string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := range n.cfg.Leaf.Remotes {
		n.cfg.Leaf.Remotes[i].Deny = append([]string(nil), deny...)
	}
	if n.srv == nil || !n.srv.Running() {
		return nil
	}
	n.leafGen++
	opts, err := n.serverOptions()
	if err != nil {
		return err
	}
	// The running account resolver, not the new one the options were
	// parsed with: a reload installs the options' resolver as the
	// server's, and a new one was never started (no peer fetches, its
	// own store beside the running one's). It also spares the reload a
	// deep comparison of the running resolver's state, which races with
	// the server's goroutines.
	opts.AccountResolver = n.srv.AccountResolver()
	if err := n.srv.ReloadOptions(opts); err != nil {
		return fmt.Errorf("embeddednats: %s: apply link deny list: %w", n.cfg.Name, err)
	}
	return nil
}

// LeafURL returns the nats-leaf:// URL other regions dial ("" when the
// node has no leafnode listener).
func (n *Node) LeafURL() string {
	if n.cfg.Leaf.Port <= 0 {
		return ""
	}
	host := n.cfg.Leaf.Host
	if host == "" {
		host = n.cfg.Host
	}
	return "nats-leaf://" + net.JoinHostPort(host, strconv.Itoa(n.cfg.Leaf.Port))
}

// Linked reports how many leafnode connections the node has.
func (n *Node) Linked() int {
	s := n.Server()
	if s == nil {
		return 0
	}
	return s.NumLeafNodes()
}
