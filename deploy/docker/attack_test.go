package docker_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/attack"
	"github.com/msgplatform/platform/internal/dockertest"
	"github.com/msgplatform/platform/internal/tlsconf/tlstest"
)

// attackTransport tries the region's ports as an intruder on the host and
// on the compose network would, and checks that each attempt is refused
// and that the orders stream and the region's routes are unchanged:
//
//   - a plaintext NATS client (CONNECT and PUB without TLS) on a published
//     client port;
//   - a client with the admin creds that trusts another CA;
//   - a rogue platformd on the compose network dialling the routes with
//     its own trust and a certificate of its own CA (refused by the
//     routes' mutual TLS);
//   - a rogue platformd with the rig's own CA and node certificate (the
//     TLS files leaked) but its own trust: its routes lack the route
//     credentials derived from the rig's trust and are refused.
func (r *region) attackTransport(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	before := streamState(t, js)

	dockertest.PlaintextRefused(t, r.NATSPort, topic+".order:plain", nodes...)
	attack.Refused(t, "docker_plaintext_client")

	other := tlstest.NewT(t)
	tc, err := other.Trust().Client("")
	if err != nil {
		t.Fatal(err)
	}
	if nc, err := nats.Connect(r.natsURL(nodes[0]), nats.Secure(tc), nats.Timeout(3*time.Second),
		nats.UserCredentials(filepath.Join(r.Shared, "creds", "admin.creds"))); err == nil {
		nc.Close()
		t.Fatal("a client trusting another CA connected (it would have sent the admin creds to an impostor)")
	}
	attack.Refused(t, "docker_client_wrong_ca")

	network := r.Name + "_default"
	dial := []string{"nats-route://n1:6222", "nats-route://n2:6222", "nats-route://n3:6222"}
	rogueTLS := dockertest.TLSDir(t, t.TempDir(), r.UID, r.GID, "rogue1")
	rogues := map[string]dockertest.Rogue{
		"docker_route_foreign_ca":    dockertest.StartRogue(t, r.Image, network, "/etc/platformd/node.yaml", "rogue1", rogueTLS.Dir, r.UID, r.GID, dial...),
		"docker_route_without_creds": dockertest.StartRogue(t, r.Image, network, "/etc/platformd/node.yaml", "rogue2", r.TLS.Dir, r.UID, r.GID, dial...),
	}
	// The rogues dial every 1 s or so; give them 15 s of attempts, then
	// ask every node (as the system user) for its routes.
	time.Sleep(15 * time.Second)
	links := dockertest.Links(t, filepath.Join(r.Shared, "trust"), r.natsURL(nodes[0]), r.TLS.CAFile())
	dockertest.RoguesRefused(t, links, rogues, "route", "its routes", "route")
	if after := streamState(t, js); after != before {
		t.Fatalf("the attacks changed stream %s: %s, was %s", stream, after, before)
	}
}

// streamState is the orders stream's message count and replica set.
func streamState(t *testing.T, js jetstream.JetStream) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, info := ordersStream(t, ctx, js)
	peers := []string{}
	if info.Cluster != nil {
		peers = append(peers, info.Cluster.Leader)
		for _, p := range info.Cluster.Replicas {
			peers = append(peers, p.Name)
		}
	}
	slices.Sort(peers)
	return fmt.Sprintf("msgs %d, last seq %d, peers %v", info.State.Msgs, info.State.LastSeq, peers)
}
