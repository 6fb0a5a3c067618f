package dockertest

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/msgplatform/platform/internal/tlsconf"
	"github.com/msgplatform/platform/internal/tlsconf/tlstest"
)

// Rig is a compose project of a deploy directory's own platformd image,
// up, with TLS on every port: what its tests reach it through.
type Rig struct {
	Project
	Root, Here string            // the module root, and the deploy directory (the test's working directory)
	Shared     string            // the directory the containers share (creds, trust, tls)
	TLS        tlstest.RigFiles  // Shared/tls, mounted at /tls
	Image      string            // the image tag
	UID, GID   int               // the containers' user
	NATSPort   map[string]int    // node -> published NATS client port
	HTTPPort   map[string]int    // node -> published HTTP port
	Containers map[string]string // node -> container id
}

// RigSpec says which rig StartRig brings up.
type RigSpec struct {
	Name     string        // the rig's name, which starts its skip messages
	Image    string        // the image name, tagged test-<random>
	Project  string        // the project name's prefix, followed by a random suffix
	Files    []string      // the files of Here the image copies besides the Dockerfile
	TLSHosts []string      // the names the node certificate is valid for
	Nodes    []string      // the compose services, each with published ports
	LogTail  int           // the compose log lines dumped when the test failed
	Ready    time.Duration // how long every node may take to be ready
}

// StartRig, run by a test in a deploy directory (Dockerfile,
// compose.yaml), builds its image, writes the shared directory and the TLS
// files, publishes free loopback ports for spec.Nodes, brings the project
// up and waits until every node is ready. Everything it creates is
// removed when the test ends. Under -short, or without a Docker engine
// or compose, the test is skipped.
func StartRig(tb testing.TB, spec RigSpec) *Rig {
	tb.Helper()
	SkipShort(tb, fmt.Sprintf("%s: skipped with -short (builds an image and runs %d containers)", spec.Name, len(spec.Nodes)))
	compose := ComposeCommand(tb, spec.Name, "no Docker engine answers")
	here, err := filepath.Abs(".")
	if err != nil {
		tb.Fatal(err)
	}
	root := filepath.Join(here, "..", "..")
	uid, gid := RuntimeIDs()
	tag := spec.Image + ":test-" + RandHex(6)
	BuildImage(tb, root, here, tag, uid, gid, spec.Files...)
	r := &Rig{
		Project: Project{Compose: compose, File: filepath.Join(here, "compose.yaml"), Name: spec.Project + RandHex(4)},
		Root:    root,
		Here:    here,
		Shared:  SharedDir(tb, uid, gid),
		Image:   tag,
		UID:     uid,
		GID:     gid,
	}
	r.TLS = TLSDir(tb, r.Shared, uid, gid, spec.TLSHosts...)
	r.NATSPort, r.HTTPPort = r.Publish(tb, tag, r.Shared, spec.Nodes...)

	start := time.Now()
	r.Containers = r.Up(tb, spec.LogTail, spec.Nodes...)
	WaitReady(tb, spec.Ready, fmt.Sprintf("%v ready (/readyz 200)", spec.Nodes), r.TLS, r.HTTPPort, spec.Nodes...)
	tb.Logf("rig up (project %s, image %s, NATS ports %v, HTTP ports %v) and ready in %s",
		r.Name, tag, r.NATSPort, r.HTTPPort, time.Since(start).Round(time.Millisecond))
	return r
}

// URLs are the tls:// client URLs of nodes' published NATS ports.
func (r *Rig) URLs(nodes ...string) []string {
	urls := make([]string, len(nodes))
	for i, n := range nodes {
		urls[i] = fmt.Sprintf("tls://127.0.0.1:%d", r.NATSPort[n])
	}
	return urls
}

// Connect connects as the platform admin to nodes' published ports (TLS,
// verified against the rig's CA) as client name, reconnecting forever
// every reconnectWait, and closes the connection when the test ends. It
// fails the test when a node told the client another address: the
// client reaches the nodes through their published ports only.
func (r *Rig) Connect(tb testing.TB, name string, reconnectWait time.Duration, nodes ...string) *nats.Conn {
	tb.Helper()
	urls := r.URLs(nodes...)
	tc, err := tlsconf.Config{CAFile: r.TLS.CAFile()}.Client("")
	if err != nil {
		tb.Fatal(err)
	}
	nc, err := nats.Connect(strings.Join(urls, ","),
		nats.Secure(tc),
		nats.UserCredentials(filepath.Join(r.Shared, "creds", "admin.creds")),
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(reconnectWait),
		nats.Timeout(2*time.Second),
	)
	if err != nil {
		tb.Fatalf("connect %s (%v): %v", name, urls, err)
	}
	tb.Cleanup(nc.Close)
	if d := nc.DiscoveredServers(); len(d) > 0 {
		tb.Fatalf("%s: nodes advertised addresses to the client despite no_advertise: %v", name, d)
	}
	for _, s := range nc.Servers() {
		if !slices.Contains(urls, s) {
			tb.Fatalf("%s: client knows a server it was not given: %s (all: %v)", name, s, nc.Servers())
		}
	}
	return nc
}
