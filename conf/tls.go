package conf

import (
	"net"
	"net/url"

	"github.com/msgplatform/platform/internal/validate"
)

// validateTransport refuses, in mode node, a listener on a non-loopback
// address without TLS (and leafnode remotes dialling one), unless
// insecure: true: such a port carries tenants' payloads and the
// platform's credentials across a network. A loopback listener needs no
// TLS; modes fabric and regions are for development and are not checked.
func (c *Config) validateTransport(p *validate.Problems) {
	if c.Mode != ModeNode || c.Insecure {
		return
	}
	plain := func(key, what, host string) {
		if host == "" {
			host = "every interface"
		}
		p.Addf(key, "%s %s without TLS; set %s or insecure: true", what, host, key)
	}
	n := c.Node
	if !isLoopback(n.Host) && !n.TLS.Enabled() {
		plain("node.tls", "clients listen on", n.Host)
	}
	if n.Clustered() {
		host := n.Cluster.Host
		if host == "" {
			host = n.Host
		}
		if !isLoopback(host) && !n.Cluster.TLS.Enabled() {
			plain("node.cluster.tls", "routes listen on", host)
		}
	}
	if !n.Leaf.TLS.Enabled() {
		if n.Leaf.Port != 0 {
			host := n.Leaf.Host
			if host == "" {
				host = n.Host
			}
			if !isLoopback(host) {
				plain("node.leaf.tls", "leafnodes listen on", host)
			}
		}
	remotes:
		for _, r := range n.Leaf.Remotes {
			for _, raw := range r.URLs {
				if u, err := url.Parse(raw); err == nil && !isLoopback(u.Hostname()) {
					plain("node.leaf.tls", "leafnode remotes dial", u.Host)
					break remotes
				}
			}
		}
	}
	if c.HTTP.Enabled() && !c.HTTP.TLS.Enabled() {
		if host, _, err := splitListen(c.HTTP.Listen); err == nil && !isLoopback(host) {
			plain("http.tls", "HTTP listens on", host)
		}
	}
}

// isLoopback reports whether host is a loopback address or localhost
// ("" and the wildcards are every interface, not loopback).
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
