package conf

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/internal/tlsconf"
	"github.com/msgplatform/platform/internal/validate"
)

// RegionsConfig is the regions: section. In mode regions it is every
// region run in this process (embeddednats.RegionsConfig: fabrics,
// leaf_port, deny); in mode node, Peers names the other regions of the
// installation, so that this node's control API can run the region
// operations (mirror, failover, failback, residency report).
type RegionsConfig struct {
	embeddednats.RegionsConfig `mapstructure:",squash"`
	// Peers are the other regions, reached directly on their own client
	// URLs with an admin connection (never through the leafnode link):
	// regions.peers: [{name: us, urls: [nats://us1:4222, ...], creds: ...}].
	// Mode node only.
	Peers []PeerRegion `mapstructure:"peers"`
}

// PeerRegion is another region of the installation, as a mode-node
// platformd reaches it for the region operations.
type PeerRegion struct {
	// Name is the region's name (its node.region.name).
	Name string `mapstructure:"name"`
	// Domain is its JetStream domain (default: Name).
	Domain string `mapstructure:"domain"`
	// URLs are the region's client URLs (nats://host:port or
	// tls://host:port); a comma-separated string is accepted too.
	URLs []string `mapstructure:"urls"`
	// Creds is a .creds file of an admin user of the platform account in
	// that region; "" uses this installation's admin user, minted from the
	// shared trust (data_dir/trust), which every region of one
	// installation shares.
	Creds string `mapstructure:"creds"`
	// TLS is how this node dials the peer's client port: ca_file (the
	// peer's CA; the system roots when empty) and, where the peer's
	// node.tls.verify asks for one, cert_file and key_file. Set, it dials
	// TLS whatever the URL scheme; a tls:// URL without it is checked
	// against the system roots.
	TLS tlsconf.Config `mapstructure:"tls"`
}

var peerNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// ensurePeerDefaults fills each peer's domain from its name.
func (c *RegionsConfig) ensurePeerDefaults() {
	if len(c.Peers) == 0 {
		c.Peers = nil
	}
	for i := range c.Peers {
		if c.Peers[i].Domain == "" {
			c.Peers[i].Domain = c.Peers[i].Name
		}
	}
}

// validatePeers reports every problem of regions.peers, keyed relative to
// regions: (peers[i].<key>). own is this node's region; peers are allowed
// in mode node only.
func (c *RegionsConfig) validatePeers(mode string, own embeddednats.Region) error {
	var p validate.Problems
	if len(c.Peers) > 0 && mode != ModeNode {
		p.Addf("peers", "is for mode node only, got %d peers in mode %s (mode regions runs every region in this process; mode fabric runs one)", len(c.Peers), mode)
		return p.Err(ErrInvalid)
	}
	own.EnsureDefaults()
	names, domains := map[string]int{}, map[string]int{}
	for i, r := range c.Peers {
		key := fmt.Sprintf("peers[%d]", i)
		domain := r.Domain
		if domain == "" {
			domain = r.Name
		}
		switch {
		case !peerNameRE.MatchString(r.Name):
			p.Addf(key+".name", "must be the peer region's name, 1-64 letters, digits, '-' or '_', got %q", r.Name)
		case r.Name == own.Name:
			p.Addf(key+".name", "%q is this node's own region (node.region.name): peers are the other regions", r.Name)
		default:
			if j, dup := names[r.Name]; dup {
				p.Addf(key+".name", "%q is also peers[%d]: name each region once", r.Name, j)
			}
			names[r.Name] = i
		}
		switch {
		case !peerNameRE.MatchString(domain) || strings.ContainsAny(domain, ".*>"):
			p.Addf(key+".domain", "must be 1-64 letters, digits, '-' or '_', got %q", domain)
		case domain == own.Domain:
			p.Addf(key+".domain", "%q is this node's own JetStream domain: every region has its own", domain)
		default:
			if j, dup := domains[domain]; dup {
				p.Addf(key+".domain", "%q is also the domain of peers[%d]: every region has its own", domain, j)
			}
			domains[domain] = i
		}
		if len(r.URLs) == 0 {
			p.Addf(key+".urls", "must list at least one client URL of region %s (nats://host:port), reached directly, not through the link", r.Name)
		}
		for j, u := range r.URLs {
			if err := checkPeerURL(u); err != nil {
				p.Addf(fmt.Sprintf("%s.urls[%d]", key, j), "%v, got %q", err, u)
			}
		}
		if r.TLS.Verify {
			p.Addf(key+".tls.verify", "is for listeners: a peer is dialled (give cert_file and key_file to present a client certificate)")
		}
		r.TLS.ValidateClient(&p, key+".tls")
		if r.Creds != "" && strings.TrimSpace(r.Creds) != r.Creds {
			p.Addf(key+".creds", "must be a path without surrounding spaces, got %q", r.Creds)
		}
	}
	return p.Err(ErrInvalid)
}

// checkPeerURL accepts nats://host:port and tls://host:port.
func checkPeerURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("must be a nats://host:port URL (%v)", err)
	}
	if u.Scheme != "nats" && u.Scheme != "tls" {
		return fmt.Errorf("must be a nats:// or tls:// client URL (not a route or leafnode URL)")
	}
	if u.Hostname() == "" || u.Port() == "" {
		return fmt.Errorf("must name a host and a port, e.g. nats://us1:4222")
	}
	return nil
}
