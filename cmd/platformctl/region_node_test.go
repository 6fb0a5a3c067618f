package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/conf"
	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/daemon/daemontest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/region"
)

// nodeRegionConfig is a standalone mode-node platformd of region name on
// port (one node, R1) sharing trust, with topics and peers.
func nodeRegionConfig(t *testing.T, trust *embeddednats.Trust, name string, port int, topics []platform.TopicSpec, peers []conf.PeerRegion) *conf.Config {
	t.Helper()
	cat := platform.Catalog{Topics: map[string]platform.TopicSpec{}}
	for _, tp := range topics {
		tp.Replicas = 1
		cat.Topics[tp.Name] = tp
	}
	return daemontest.NodeRegionConfig(t, trust, name, port, cat, peers)
}

// TestCLIRegionsNodeMode is the failover scenario driven with platformctl
// against two mode-node platformds (eu, us; one node each, linked by a
// leafnode that us dials), each naming the other in regions.peers: us's
// peer eu with a creds file, eu's peer us with the shared trust's admin.
// It mirrors orders eu -> us, refuses the resident orders.eu, kills eu,
// fails over to us through us's control API, writes there, restarts eu,
// fails back, and checks that every acknowledged event is in eu exactly
// once and the mirror in us again holds them all (lost 0, duplicated 0).
func TestCLIRegionsNodeMode(t *testing.T) {
	trust := newTrust(t)
	ports := natstest.FreePorts(t, 3)
	euPort, usPort, leafPort := ports[0], ports[1], ports[2]
	ordersEU, orders, invoices := platform.DefaultTopicSpec("orders.eu"), platform.DefaultTopicSpec("orders"), platform.DefaultTopicSpec("invoices")
	ordersEU.Residency = "eu"
	orders.Partitions, ordersEU.Partitions, invoices.Partitions = 2, 1, 1
	deny := region.LinkDeny([]platform.TopicSpec{ordersEU})

	// eu: the hub, listening for the link; its peer us on the shared trust.
	euCfg := nodeRegionConfig(t, trust, "eu", euPort, []platform.TopicSpec{orders, ordersEU},
		[]conf.PeerRegion{{Name: "us", URLs: []string{fmt.Sprintf("nats://127.0.0.1:%d", usPort)}}})
	euCfg.Node.Leaf.Host, euCfg.Node.Leaf.Port = "127.0.0.1", leafPort
	eu := startDaemon(t, euCfg)

	// us: dials eu; its peer eu with a creds file (0600).
	usCfg := nodeRegionConfig(t, trust, "us", usPort, []platform.TopicSpec{invoices},
		[]conf.PeerRegion{{Name: "eu", URLs: []string{eu.URL()}, Creds: writeCreds(t, trust)}})
	usCfg.Node.Leaf.Remotes = []embeddednats.LeafRemote{{URLs: []string{fmt.Sprintf("nats-leaf://127.0.0.1:%d", leafPort)}, Deny: deny}}
	us := startDaemon(t, usCfg)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	reconnect := []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond)}
	_, jsEU := adminJetStream(t, trust, eu.URL(), reconnect...)
	ncUS, jsUS := adminJetStream(t, trust, us.URL(), reconnect...)
	waitLinked(t, ncUS, "eu")

	if out, err := runCLI(t, us, "region", "list"); err != nil || !strings.Contains(out, "us") || !strings.Contains(out, "eu") {
		t.Fatalf("region list on us: %v\n%s", err, out)
	}
	out, err := runCLI(t, eu, "region", "mirror", "orders.eu", "--to", "us")
	if !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), "topic orders.eu is resident in eu") {
		t.Fatalf("resident mirror: want a refusal naming eu, got %v\n%s", err, out)
	}
	if out, err = runCLI(t, eu, "region", "mirror", "orders", "--to", "us"); err != nil || !strings.Contains(out, "created mirror of topic orders: eu -> us") {
		t.Fatalf("mirror orders: %v\n%s", err, out)
	}

	const N, M = 100, 40
	publishIDs(ctx, t, jsEU, "orders", "eu", 0, N)
	natstest.WaitFor(t, 30*time.Second, func() error { return streamHas(ctx, jsUS, "orders", N) })
	if out, err = runCLI(t, us, "region", "mirrors"); err != nil || !strings.Contains(out, "orders") {
		t.Fatalf("region mirrors on us: %v\n%s", err, out)
	}
	if out, err = runCLI(t, us, "residency", "report"); err != nil || !strings.Contains(out, "us:orders(mirror of orders)") || !strings.Contains(out, "No violations.") {
		t.Fatalf("residency report on us: %v\n%s", err, out)
	}
	t.Log(out)

	// eu goes down; us's platformd fails orders over to itself.
	euNode := eu.Nodes()[0]
	euNode.Kill()
	out, err = runCLI(t, us, "region", "failover", "orders", "--to", "us")
	if err != nil || !strings.Contains(out, "topic orders failed over: eu -> us") || !strings.Contains(out, "duplicate window consumers must absorb") {
		t.Fatalf("failover with eu down: %v\n%s", err, out)
	}
	t.Log(out)
	publishIDs(ctx, t, jsUS, "orders", "us", 0, M)

	// eu returns; the failback copies the outage's writes home.
	if err := euNode.Launch(); err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(ctx, 60*time.Second)
	if err := euNode.WaitReady(rctx); err != nil {
		t.Fatal(err)
	}
	rcancel()
	waitLinked(t, ncUS, "eu")
	natstest.WaitFor(t, 30*time.Second, func() error {
		_, err := jsEU.AccountInfo(ctx)
		return err
	})
	out, err = runCLI(t, us, "region", "failback", "orders")
	if err != nil || !strings.Contains(out, "topic orders failed back: us -> eu") || !strings.Contains(out, fmt.Sprintf("copied back: %d", M)) || !strings.Contains(out, "mirroring resumed: eu -> us") {
		t.Fatalf("failback: %v\n%s", err, out)
	}
	t.Log(out)

	// Every acknowledged event exactly once in eu; the mirror again in step.
	ids := streamIDs(ctx, t, jsEU, "orders")
	lost, dup := 0, 0
	for _, want := range append(eventIDs("eu", 0, N), eventIDs("us", 0, M)...) {
		switch ids[want] {
		case 0:
			lost++
		case 1:
		default:
			dup++
		}
	}
	if lost != 0 || dup != 0 || len(ids) != N+M {
		t.Fatalf("orders in eu: lost %d, duplicated %d, %d distinct ids; want 0, 0, %d", lost, dup, len(ids), N+M)
	}
	natstest.WaitFor(t, 30*time.Second, func() error { return streamHas(ctx, jsUS, "orders", N+M) })
	t.Logf("orders: %d events in eu exactly once, mirror in us holds %d (lost 0, duplicated 0)", len(ids), N+M)
}

// TestNodeModeRegionOpsNeedPeers: without regions.peers a mode-node
// platformd answers the region operations with an error naming
// regions.peers.
func TestNodeModeRegionOpsNeedPeers(t *testing.T) {
	r := startDaemon(t, nodeRegionConfig(t, newTrust(t), "eu", natstest.FreePorts(t, 1)[0], nil, nil))
	out, err := runCLI(t, r, "region", "failover", "orders", "--to", "us")
	if !errors.Is(err, control.ErrInvalid) || !strings.Contains(err.Error(), "regions.peers") {
		t.Fatalf("failover without peers: want an error naming regions.peers, got %v\n%s", err, out)
	}
}

// TestNodeModePeerCredsMustBeOwnerOnly: a peer creds file others can read
// stops the daemon at start with an error naming the peer and the fix.
func TestNodeModePeerCredsMustBeOwnerOnly(t *testing.T) {
	trust := newTrust(t)
	creds := writeCreds(t, trust)
	if err := os.Chmod(creds, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := nodeRegionConfig(t, trust, "us", natstest.FreePorts(t, 1)[0], nil,
		[]conf.PeerRegion{{Name: "eu", URLs: []string{"nats://127.0.0.1:1"}, Creds: creds}})
	d := daemontest.NewConfig(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := d.Start(ctx)
	if err == nil || !strings.Contains(err.Error(), "regions.peers[0] (eu)") || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("start with a 0644 peer creds file: want a refusal naming regions.peers[0] and chmod 600, got %v", err)
	}
}

// waitLinked waits until domain's JetStream answers on nc (through the
// leafnode link).
func waitLinked(t *testing.T, nc *nats.Conn, domain string) {
	t.Helper()
	js, err := jetstream.NewWithDomain(nc, domain)
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 60*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := js.AccountInfo(ctx)
		return err
	})
}

func eventIDs(prefix string, from, n int) []string {
	out := make([]string, n)
	for i := range n {
		out[i] = fmt.Sprintf("%s-%d", prefix, from+i)
	}
	return out
}

// publishIDs publishes n events to topic, each with its own Nats-Msg-Id,
// and fails the test unless every one is acknowledged.
func publishIDs(ctx context.Context, t *testing.T, js jetstream.JetStream, topic, prefix string, from, n int) {
	t.Helper()
	for i, id := range eventIDs(prefix, from, n) {
		subj := fmt.Sprintf("%s.order:K-%d", topic, i%7)
		if _, err := js.Publish(ctx, subj, []byte(id), jetstream.WithMsgID(id)); err != nil {
			t.Fatalf("publish %s to %s: %v", id, subj, err)
		}
	}
}

// streamHas reports nil once topic's stream on js holds exactly n messages.
func streamHas(ctx context.Context, js jetstream.JetStream, topic string, n int) error {
	s, err := js.Stream(ctx, platform.StreamName(topic))
	if err != nil {
		return err
	}
	if got := s.CachedInfo().State.Msgs; got != uint64(n) {
		return fmt.Errorf("%s holds %d messages, want %d", topic, got, n)
	}
	return nil
}

// streamIDs counts the Nats-Msg-Id of every message of topic's stream.
func streamIDs(ctx context.Context, t *testing.T, js jetstream.JetStream, topic string) map[string]int {
	t.Helper()
	s, err := js.Stream(ctx, platform.StreamName(topic))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	last := s.CachedInfo().State.LastSeq
	for seq := s.CachedInfo().State.FirstSeq; seq <= last && seq > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatalf("get %s seq %d: %v", topic, seq, err)
		}
		out[m.Header.Get(jetstream.MsgIDHeader)]++
	}
	return out
}
