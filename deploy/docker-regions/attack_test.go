package dockerregions_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/attack"
	"github.com/msgplatform/platform/internal/dockertest"
)

// attackTransport tries the rig's ports as an intruder would, each
// attempt refused with eu's streams unchanged:
//
//   - a plaintext NATS client (CONNECT and PUB without TLS) on every
//     published client port of both regions;
//   - a rogue platformd on eu's network dialling eu's routes with its own
//     trust and a certificate of its own CA (route mTLS refuses it);
//   - a rogue platformd on the link network dialling eu's leafnode
//     listeners with the rig's own TLS files (leaked) but its own trust:
//     its link user is not the installation's, the link refuses it.
func (r *rig) attackTransport(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	before := streamsState(t, js)
	for _, region := range []string{"eu", "us"} {
		dockertest.PlaintextRefused(t, r.NATSPort, "orders.order:plain", nodes[region]...)
	}
	attack.Refused(t, "regions_plaintext_client")

	rogueTLS := dockertest.TLSDir(t, t.TempDir(), r.UID, r.GID, "rogue-eu")
	rogues := map[string]dockertest.Rogue{
		"regions_route_foreign_ca": dockertest.StartRogue(t, r.Image, r.Name+"_eu", "/etc/platformd/eu.yaml", "rogue-eu", rogueTLS.Dir, r.UID, r.GID,
			"nats-route://eu1:6222", "nats-route://eu2:6222", "nats-route://eu3:6222"),
		"regions_leafnode_without_creds": dockertest.StartRogue(t, r.Image, r.linkNetwork(), "/etc/platformd/us.yaml", "rogue-us", r.TLS.Dir, r.UID, r.GID,
			"nats-route://us1:6222"),
	}
	// The rogues dial every 1 s or so; give them 15 s of attempts, then
	// ask every node of both regions (as the system user) for its routes
	// and leafnode connections.
	time.Sleep(15 * time.Second)
	var links []dockertest.Link
	for _, region := range []string{"eu", "us"} {
		links = append(links, dockertest.Links(t, filepath.Join(r.Shared, "trust"), r.URLs(nodes[region][0])[0], r.TLS.CAFile())...)
	}
	dockertest.RoguesRefused(t, links, rogues, "leafnode", "the link's leafnode connections", "connection")
	if after := streamsState(t, js); after != before {
		t.Fatalf("the attacks changed eu's streams: %s, was %s", after, before)
	}
}

// streamsState is every stream of js with its message count and last
// sequence.
func streamsState(t *testing.T, js jetstream.JetStream) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []string
	l := js.ListStreams(ctx)
	for info := range l.Info() {
		out = append(out, fmt.Sprintf("%s:%d/%d", info.Config.Name, info.State.Msgs, info.State.LastSeq))
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}
