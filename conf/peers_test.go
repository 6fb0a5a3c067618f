package conf_test

import (
	"reflect"
	"testing"

	"github.com/msgplatform/platform/conf"
	"github.com/msgplatform/platform/internal/tlsconf/tlstest"
)

const peersNode = `
mode: node
node:
  name: us1
  region:
    name: us
  durability:
    replicas: 1
`

// TestLoadRegionsPeers: regions.peers of a mode-node file are read (urls
// as a list or a comma-separated string, domain defaulting to the name).
func TestLoadRegionsPeers(t *testing.T) {
	c := mustLoad(t, writeFile(t, peersNode+`
regions:
  peers:
    - name: eu
      urls: nats://eu1:4222, nats://eu2:4222
      creds: /etc/platformd/peers/eu.creds
    - name: ap
      domain: apac
      urls: [tls://ap1:4222]
`))
	want := []conf.PeerRegion{
		{Name: "eu", Domain: "eu", URLs: []string{"nats://eu1:4222", "nats://eu2:4222"}, Creds: "/etc/platformd/peers/eu.creds"},
		{Name: "ap", Domain: "apac", URLs: []string{"tls://ap1:4222"}},
	}
	if !reflect.DeepEqual(c.Regions.Peers, want) {
		t.Fatalf("regions.peers = %+v, want %+v", c.Regions.Peers, want)
	}
}

// TestRegionsPeersProblems: every mistake in regions.peers is reported at
// once, keyed by its path, saying what is wrong.
func TestRegionsPeersProblems(t *testing.T) {
	_, err := load(t, writeFile(t, peersNode+`
regions:
  peers:
    - name: us
      urls: [nats://us2:4222]
    - name: eu
    - name: eu
      urls: [nats-leaf://eu1:7422, "nats://eu1"]
    - name: "bad name"
      urls: [nats://x:1]
    - name: ap
      domain: us
      urls: [nats://ap1:4222]
      unknown: 1
`))
	problems(t, err)
	for _, line := range []string{
		`regions.peers[0].name: "us" is this node's own region (node.region.name): peers are the other regions`,
		`regions.peers[1].urls: must list at least one client URL of region eu (nats://host:port), reached directly, not through the link`,
		`regions.peers[2].name: "eu" is also peers[1]: name each region once`,
		`regions.peers[2].urls[0]: must be a nats:// or tls:// client URL (not a route or leafnode URL), got "nats-leaf://eu1:7422"`,
		`regions.peers[2].urls[1]: must name a host and a port, e.g. nats://us1:4222, got "nats://eu1"`,
		`regions.peers[3].name: must be the peer region's name, 1-64 letters, digits, '-' or '_', got "bad name"`,
		`regions.peers[4].domain: "us" is this node's own JetStream domain: every region has its own`,
	} {
		wantProblem(t, err, line)
	}
	wantProblem(t, err, `regions.peers[4].unknown: unknown key`)
	if t.Failed() {
		t.Log(err)
	}
}

// TestRegionsPeersNodeModeOnly: peers in another mode are refused.
func TestRegionsPeersNodeModeOnly(t *testing.T) {
	_, err := load(t, writeFile(t, `
mode: fabric
regions:
  peers:
    - name: us
      urls: [nats://us1:4222]
`))
	problems(t, err)
	wantProblem(t, err, `regions.peers: is for mode node only, got 1 peers in mode fabric (mode regions runs every region in this process; mode fabric runs one)`)
}

// TestRegionsPeersTLS: a peer's tls (the CA and client certificate this
// node dials it with) is read, and its mistakes are named by key.
func TestRegionsPeersTLS(t *testing.T) {
	ca := tlstest.NewT(t)
	cl := ca.ClientT(t, "us1")
	c := mustLoad(t, writeFile(t, peersNode+`
regions:
  peers:
    - name: eu
      urls: [tls://eu1:4222]
      tls:
        ca_file: `+ca.CAFile+`
        cert_file: `+cl.CertFile+`
        key_file: `+cl.KeyFile+`
`))
	if got := c.Regions.Peers[0].TLS; got != cl {
		t.Fatalf("regions.peers[0].tls = %+v, want %+v", got, cl)
	}
	_, err := load(t, writeFile(t, peersNode+`
regions:
  peers:
    - name: eu
      urls: [tls://eu1:4222]
      tls:
        ca_file: /nonexistent/ca.pem
        cert_file: `+cl.CertFile+`
        verify: true
`))
	problems(t, err)
	for _, line := range []string{
		`regions.peers[0].tls.ca_file: cannot be read: stat /nonexistent/ca.pem: no such file or directory`,
		`regions.peers[0].tls: cert_file and key_file go together (a client certificate and its key)`,
		`regions.peers[0].tls.verify: is for listeners: a peer is dialled (give cert_file and key_file to present a client certificate)`,
	} {
		wantProblem(t, err, line)
	}
	if t.Failed() {
		t.Log(err)
	}
}
