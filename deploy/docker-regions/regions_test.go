package dockerregions_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/conf"
	"github.com/msgplatform/platform/internal/dockertest"
	"github.com/msgplatform/platform/platform"
)

// The topics of the rig: in eu (eu.yaml) orders (mirrored to us) and
// orders.eu (resident in eu); in us (us.yaml) invoices (mirrored to eu)
// and invoices.us (resident in us).
var topics = []topicAt{
	{Name: "orders", Region: "eu", Key: "order"},
	{Name: "orders.eu", Region: "eu", Key: "order", Resident: true},
	{Name: "invoices", Region: "us", Key: "invoice"},
	{Name: "invoices.us", Region: "us", Key: "invoice", Resident: true},
}

type topicAt struct {
	Name, Region, Key string
	Resident          bool
}

// other is the region that is not r.
func other(r string) string {
	if r == "eu" {
		return "us"
	}
	return "eu"
}

// nodes are the compose services of each region.
var nodes = map[string][]string{"eu": {"eu1", "eu2", "eu3"}, "us": {"us1", "us2", "us3"}}

// ledger is every acknowledged event id, by topic, in publish order.
type ledger map[string][]string

func (l ledger) add(topic string, ids []string) { l[topic] = append(l[topic], ids...) }

// TestDockerRegions runs compose.yaml (region eu and region us, three
// clustered platformd containers each, R3 streams, us dialling the three
// eu leafnode listeners over the compose network "link", each region
// naming the other in regions.peers, reached over the network "peers").
// Mirror, failover and failback are run with the platformctl binary
// against the control API of the region's own platformd nodes; the
// residency checks and report use platform.Regions from this process (one
// admin connection per region on its published loopback ports).
//
//  1. orders is mirrored eu -> us and invoices us -> eu; N events are
//     published to each of the four topics (resident and not, in both
//     regions); each mirror holds its topic's N exactly once.
//  2. Residency, for orders.eu and invoices.us: the platform refuses their
//     mirror to the other region, the residency check of a hand-made one
//     and their failover; a hand-made mirror created with the real nats
//     CLI (`nats stream add --config`, a cross-domain mirror) in the other
//     region is deleted by that region's residency guard, which records
//     why in its audit stream; a core subscriber in the other region
//     receives 0 events while one at home receives them all; the residency
//     report finds no violation.
//  3. The link is cut (docker network disconnect of the us nodes from
//     "link"): both regions keep acknowledging writes to all four topics,
//     the mirrors stall; reconnected, both mirrors catch up exactly once.
//  4. The three eu nodes are killed; orders fails over to us
//     (`platformctl region failover orders --to us` against us: 0
//     unreplicated); M events are written to orders (and invoices) in us.
//  5. eu is restarted; orders fails back (`platformctl region failback
//     orders` against us); every acknowledged event of all
//     four topics exists exactly once in its home region, both mirrors
//     hold their topic exactly once, and no resident event is in the other
//     region (lost 0, duplicated 0).
func TestDockerRegions(t *testing.T) {
	start := time.Now()
	rig := startRig(t)
	checkLinkDeny(t, rig.here)
	checkPeers(t, rig.here)

	conns := map[string]*nats.Conn{"eu": rig.connect(t, "eu"), "us": rig.connect(t, "us")}
	js := map[string]jetstream.JetStream{"eu": newJS(t, conns["eu"]), "us": newJS(t, conns["us"])}
	rig.waitLinked(t, conns, 60*time.Second)
	rs := platform.Regions{
		{Name: "eu", Domain: "eu", JS: js["eu"]},
		{Name: "us", Domain: "us", JS: js["us"]},
	}
	run := randHex(4)
	acked := ledger{}
	publishAll := func(phase string, n int, only ...string) {
		for _, tp := range topics {
			if len(only) > 0 && !slices.Contains(only, tp.Region) {
				continue
			}
			acked.add(tp.Name, publish(t, js[tp.Region], tp, phase+"-"+run, n))
		}
	}

	// 1. Mirror the non-resident topics to the other region; publish to all.
	for _, tp := range topics {
		if tp.Resident {
			continue
		}
		var ms platform.MirrorStatus
		rig.platformctl(t, tp.Region, &ms, "region", "mirror", tp.Name, "--to", other(tp.Region))
		t.Logf("1. platformctl region mirror %s --to %s (against %s): created %v", tp.Name, other(tp.Region), tp.Region, ms.Created)
	}
	const N = 200
	publishAll("a", N)
	for _, tp := range topics {
		if !tp.Resident {
			caught := waitMirror(t, js[other(tp.Region)], platform.StreamName(tp.Name), N, 30*time.Second)
			assertExactlyOnce(t, tp.Name+" mirror in "+other(tp.Region), readIDs(t, js[other(tp.Region)], platform.StreamName(tp.Name)), acked[tp.Name])
			t.Logf("1. %s: %d events acknowledged in %s, all in the mirror in %s exactly once (caught up %s after the last ack)",
				tp.Name, N, tp.Region, other(tp.Region), caught.Round(time.Millisecond))
		}
	}

	// 2. Resident topics never reach the other region.
	rogues := checkResidency(t, rig, rs, js, conns, run, acked)

	// 3. Cut the link; both regions keep accepting writes.
	rig.cutLink(t, conns)
	cut := time.Now()
	const K = 100
	publishAll("cut", K)
	t.Logf("3. link cut: %d events acknowledged on each of the 4 topics in both regions in %s", K, time.Since(cut).Round(time.Millisecond))
	for _, tp := range topics {
		if !tp.Resident {
			if got := lastSeq(t, js[other(tp.Region)], platform.StreamName(tp.Name)); got != N {
				t.Errorf("mirror of %s in %s moved while the link was cut: last seq %d, want %d", tp.Name, other(tp.Region), got, N)
			}
		}
	}
	rig.reconnectLink(t, conns)
	for _, tp := range topics {
		if !tp.Resident {
			caught := waitMirror(t, js[other(tp.Region)], platform.StreamName(tp.Name), N+K, 90*time.Second)
			assertExactlyOnce(t, tp.Name+" mirror after the cut", readIDs(t, js[other(tp.Region)], platform.StreamName(tp.Name)), acked[tp.Name])
			t.Logf("3. link back: mirror of %s in %s caught up to %d in %s, exactly once", tp.Name, other(tp.Region), N+K, caught.Round(time.Millisecond))
		}
	}

	// 4. Lose eu (all three nodes), fail orders over to us, write there.
	rig.docker(t, append([]string{"kill"}, rig.ids("eu")...)...)
	killed := time.Now()
	var fo platform.Failover
	rig.platformctl(t, "us", &fo, "region", "failover", "orders", "--to", "us")
	t.Logf("4. eu1-3 killed; platformctl region failover (against us): failover of orders to us in %s: origin reachable %v, mirror last seq %d, lag %d events / %.1fs, unreplicated %d, promoted at %d, duplicate window %d",
		time.Since(killed).Round(time.Millisecond), fo.OriginReachable, fo.MirrorLastSeq, fo.LagEvents, fo.LagSeconds, fo.Unreplicated, fo.PromotedAtSeq, fo.DuplicateWindow)
	if fo.OriginReachable || fo.Unreplicated != 0 || fo.PromotedAtSeq != N+K {
		t.Fatalf("failover report: origin reachable %v, unreplicated %d, promoted at %d; want false, 0, %d", fo.OriginReachable, fo.Unreplicated, fo.PromotedAtSeq, N+K)
	}
	const M = 150
	acked.add("orders", publish(t, js["us"], topics[0], "out-"+run, M))
	publishAll("out", M, "us")
	t.Logf("4. eu down: %d events written to orders (failed over), invoices and invoices.us in us", M)

	// 5. eu back, fail back; everything exactly once where it belongs.
	rig.docker(t, append([]string{"start"}, rig.ids("eu")...)...)
	restarted := time.Now()
	rig.waitReady(t, 120*time.Second, nodes["eu"]...)
	rig.waitLinked(t, conns, 60*time.Second)
	t.Logf("5. eu1-3 restarted, ready and linked in %s", time.Since(restarted).Round(time.Millisecond))
	bctx := bounded(t, 60*time.Second)
	var fb platform.Failback
	rig.platformctl(t, "us", &fb, "region", "failback", "orders")
	t.Logf("5. platformctl region failback (against us): orders %s -> %s: scanned %d, copied %d, deduplicated %d, origin-only %d; mirror in %s: %d messages, last seq %d, lag %d; notes %v",
		fb.From, fb.To, fb.Scanned, fb.Copied, fb.Deduplicated, fb.OriginOnly, fb.Mirror.To, fb.Mirror.Messages, fb.Mirror.LastSeq, fb.Mirror.LagMessages, fb.Notes)
	if fb.To != "eu" || fb.Copied != M {
		t.Errorf("failback: to %s, copied %d; want eu, %d", fb.To, fb.Copied, M)
	}
	total := 0
	for _, tp := range topics {
		want := acked[tp.Name]
		total += len(want)
		assertExactlyOnce(t, tp.Name+" in "+tp.Region, readIDs(t, js[tp.Region], platform.StreamName(tp.Name)), want)
		if tp.Resident {
			if _, err := js[other(tp.Region)].Stream(bctx, rogues[tp.Name]); !errors.Is(err, jetstream.ErrStreamNotFound) {
				t.Errorf("hand-made mirror %s of resident %s is back in %s: %v", rogues[tp.Name], tp.Name, other(tp.Region), err)
			}
			t.Logf("5. %s: all %d acknowledged events in %s exactly once; no copy in %s", tp.Name, len(want), tp.Region, other(tp.Region))
			continue
		}
		waitMirror(t, js[other(tp.Region)], platform.StreamName(tp.Name), uint64(len(want)), 60*time.Second)
		assertExactlyOnce(t, tp.Name+" mirror in "+other(tp.Region), readIDs(t, js[other(tp.Region)], platform.StreamName(tp.Name)), want)
		t.Logf("5. %s: all %d acknowledged events in %s and in its mirror in %s, exactly once", tp.Name, len(want), tp.Region, other(tp.Region))
	}
	t.Logf("every one of the %d acknowledged events exists exactly once where it belongs: lost 0, duplicated 0; scenario took %s",
		total, time.Since(start).Round(time.Millisecond))
}

// checkResidency tries every route, for each resident topic, that the rig
// can offer out of its region and returns the names of the hand-made
// mirrors it tried (by resident topic; the guard deleted each, checked
// again at the end).
func checkResidency(t *testing.T, rig *rig, rs platform.Regions, js map[string]jetstream.JetStream, conns map[string]*nats.Conn, run string, acked ledger) map[string]string {
	t.Helper()
	ctx := bounded(t, 60*time.Second)
	rogues := map[string]string{}
	attempts, refused, carried := 0, 0, 0
	for _, tp := range topics {
		if !tp.Resident {
			continue
		}
		away := other(tp.Region)
		attempts++
		if _, err := rs.Mirror(ctx, platform.MirrorRequest{Topic: tp.Name, To: away}); !errors.Is(err, platform.ErrResidency) {
			t.Fatalf("platform mirror of resident %s to %s: err = %v, want ErrResidency", tp.Name, away, err)
		} else {
			refused++
			t.Logf("2. platform mirror of %s to %s refused: %v", tp.Name, away, err)
		}
		rogue := jetstream.StreamConfig{
			Name:   "rogue_" + platform.StreamName(tp.Name),
			Mirror: &jetstream.StreamSource{Name: platform.StreamName(tp.Name), Domain: tp.Region},
		}
		attempts++
		if err := rs.CheckStream(ctx, away, rogue); !errors.Is(err, platform.ErrResidency) {
			t.Fatalf("residency check of a hand-made mirror of %s in %s: err = %v, want ErrResidency", tp.Name, away, err)
		} else {
			refused++
			t.Logf("2. residency check (the control API's residency.check) of a hand-made mirror of %s in %s refused: %v", tp.Name, away, err)
		}
		attempts++
		if _, err := rs.Failover(ctx, platform.FailoverRequest{Topic: tp.Name, To: away}); !errors.Is(err, platform.ErrResidency) {
			t.Fatalf("failover of resident %s to %s: err = %v, want ErrResidency", tp.Name, away, err)
		} else {
			refused++
		}
		// Bypassing the platform: the real nats CLI against the other
		// region's JetStream API. JetStream creates the stream; the
		// residency guard of that region's platformd nodes deletes it
		// and records why (platform.ResidencyGuard).
		attempts++
		out := rig.natsCLI(t, away, rogue)
		rogues[tp.Name] = rogue.Name
		t.Logf("2. nats stream add %s in %s (a mirror of %s in domain %s): %s", rogue.Name, away, platform.StreamName(tp.Name), tp.Region, firstLine(out))
		var ref platform.ResidencyRefusal
		waitFor(t, 20*time.Second, fmt.Sprintf("the residency guard in %s to refuse %s", away, rogue.Name), func() error {
			if _, err := js[away].Stream(ctx, rogue.Name); !errors.Is(err, jetstream.ErrStreamNotFound) {
				return fmt.Errorf("stream %s still exists (%v)", rogue.Name, err)
			}
			audit, err := rs.ResidencyAudit(ctx, away)
			if err != nil {
				return err
			}
			for _, r := range audit {
				if r.Stream == rogue.Name {
					ref = r
					return nil
				}
			}
			return fmt.Errorf("no audit record for %s in %s", rogue.Name, away)
		})
		refused++
		t.Logf("2. the residency guard in %s %s %s (%s): %v", away, ref.Remedy, rogue.Name, ref.Action, ref.Problems)
		if !slices.ContainsFunc(ref.Problems, func(p string) bool { return strings.Contains(p, "topic "+tp.Name+" is resident in "+tp.Region) }) {
			t.Errorf("refusal of %s does not name topic %s and its region %s: %v", rogue.Name, tp.Name, tp.Region, ref.Problems)
		}
	}
	// Core subscribers, then publish to the resident topics at home.
	type subs struct{ home, away *atomic.Int64 }
	counts := map[string]subs{}
	for _, tp := range topics {
		if tp.Resident {
			attempts++
			s1, home := coreCount(t, conns[tp.Region], tp.Name+".>")
			s2, away := coreCount(t, conns[other(tp.Region)], tp.Name+".>")
			t.Cleanup(func() { _ = s1.Unsubscribe(); _ = s2.Unsubscribe() })
			counts[tp.Name] = subs{home, away}
		}
	}
	const R = 100
	for _, tp := range topics {
		if tp.Resident {
			acked.add(tp.Name, publish(t, js[tp.Region], tp, "res-"+run, R))
		}
	}
	for name, c := range counts {
		waitFor(t, 10*time.Second, fmt.Sprintf("%d events of %s at the core subscriber at home", R, name), func() error {
			if n := c.home.Load(); n < R {
				return fmt.Errorf("%d", n)
			}
			return nil
		})
	}
	time.Sleep(3 * time.Second) // long enough for anything crossing the link to arrive
	rep, err := rs.Report(ctx)
	if err != nil {
		t.Fatalf("residency report: %v", err)
	}
	for _, tp := range topics {
		if !tp.Resident {
			continue
		}
		away := other(tp.Region)
		c := counts[tp.Name]
		t.Logf("2. %s: %d events published in %s: core subscriber there got %d, in %s got %d",
			tp.Name, R, tp.Region, c.home.Load(), away, c.away.Load())
		if c.away.Load() != 0 {
			carried++
			t.Errorf("resident %s reached %s: core subscriber got %d", tp.Name, away, c.away.Load())
		}
	}
	if len(rep.Violations) != 0 {
		t.Errorf("residency report: %v", rep.Violations)
	}
	t.Logf("2. residency: %d routes tried for 2 resident topics, %d refused by the platform, %d carried events across (want 0)", attempts, refused, carried)
	if t.Failed() {
		t.FailNow()
	}
	return rogues
}

// checkLinkDeny fails when us.yaml's link deny list is not
// platform.LinkDeny of the resident topics of eu.yaml and us.yaml (mode
// node does not derive it from the other region's catalog; it is written
// by hand).
// TestDockerRegionsConfig checks eu.yaml and us.yaml without Docker: they
// load, the link's deny list is platform.LinkDeny of both regions' resident
// topics, and each names the other in regions.peers (the region operations
// of its control API), on the peers network's names with the shared creds.
func TestDockerRegionsConfig(t *testing.T) {
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	checkLinkDeny(t, here)
	checkPeers(t, here)
}

// checkPeers checks that eu.yaml and us.yaml each name the other region as
// their only peer, on its three nodes' "-peer" names (the compose network
// peers, never the link) with the shared admin creds.
func checkPeers(t *testing.T, here string) {
	t.Helper()
	for _, me := range []string{"eu", "us"} {
		c, err := conf.Load(conf.LoadOptions{File: filepath.Join(here, me+".yaml"), Env: []string{}})
		if err != nil {
			t.Fatalf("load %s.yaml: %v", me, err)
		}
		peer := other(me)
		var want []string
		for _, n := range nodes[peer] {
			want = append(want, "nats://"+n+"-peer:4222")
		}
		ps := c.Regions.Peers
		if len(ps) != 1 || ps[0].Name != peer || ps[0].Domain != peer || !slices.Equal(ps[0].URLs, want) || ps[0].Creds != "/shared/creds/admin.creds" {
			t.Fatalf("%s.yaml regions.peers = %+v; want region %s at %v with /shared/creds/admin.creds", me, ps, peer, want)
		}
	}
}

func checkLinkDeny(t *testing.T, here string) {
	t.Helper()
	load := func(f string) *conf.Config {
		c, err := conf.Load(conf.LoadOptions{File: filepath.Join(here, f), Env: []string{}})
		if err != nil {
			t.Fatalf("load %s: %v", f, err)
		}
		return c
	}
	euc, usc := load("eu.yaml"), load("us.yaml")
	var resident []platform.TopicSpec
	for _, c := range []*conf.Config{euc, usc} {
		for _, s := range c.Catalog.Topics {
			resident = append(resident, s)
		}
	}
	for _, tp := range topics {
		c := map[string]*conf.Config{"eu": euc, "us": usc}[tp.Region]
		s, ok := c.Catalog.Topics[tp.Name]
		if !ok || (s.Residency != "") != tp.Resident {
			t.Fatalf("%s.yaml: topic %s missing or its residency is not what the test expects (resident %v)", tp.Region, tp.Name, tp.Resident)
		}
	}
	want := platform.LinkDeny(resident)
	if len(usc.Node.Leaf.Remotes) != 1 || len(usc.Node.Leaf.Remotes[0].URLs) != 3 {
		t.Fatalf("us.yaml: want one leaf remote with the three eu listeners, got %+v", usc.Node.Leaf.Remotes)
	}
	got := usc.Node.Leaf.Remotes[0].Deny
	slices.Sort(want)
	got = slices.Sorted(slices.Values(got))
	if !slices.Equal(got, want) {
		t.Fatalf("us.yaml node.leaf.remotes[0].deny drifted from platform.LinkDeny(resident topics of eu.yaml and us.yaml):\n got %q\nwant %q", got, want)
	}
}

// publish publishes n events to topic tp (keys <key>:HC-<i%7>), each with
// the event id prefix-<i> as Nats-Msg-Id and payload, waits for every ack
// and returns the ids.
func publish(t *testing.T, js jetstream.JetStream, tp topicAt, prefix string, n int) []string {
	t.Helper()
	ctx := bounded(t, 60*time.Second)
	ids := make([]string, 0, n)
	futures := make([]jetstream.PubAckFuture, 0, n)
	for i := range n {
		id := fmt.Sprintf("%s-%s-%d", tp.Name, prefix, i)
		m := nats.NewMsg(fmt.Sprintf("%s.%s:HC-%d", tp.Name, tp.Key, i%7))
		m.Header.Set(jetstream.MsgIDHeader, id)
		m.Data = []byte(id)
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			t.Fatalf("publish %s: %v", id, err)
		}
		ids = append(ids, id)
		futures = append(futures, f)
	}
	for i, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			t.Fatalf("publish %s: %v", ids[i], err)
		case <-ctx.Done():
			t.Fatalf("publish %s: no ack: %v", ids[i], ctx.Err())
		}
	}
	return ids
}

// lastSeq returns the last sequence of stream in js.
func lastSeq(t *testing.T, js jetstream.JetStream, stream string) uint64 {
	t.Helper()
	ctx := bounded(t, 10*time.Second)
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatalf("stream %s info: %v", stream, err)
	}
	return info.State.LastSeq
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s
}

// rig is a running compose project of compose.yaml.
type rig struct {
	dockertest.Project
	here       string
	ctl        string // the platformctl binary
	shared     string
	natsPort   map[string]int    // node -> host port
	httpPort   map[string]int    // node -> host port
	containers map[string]string // node -> container id
}

// startRig builds the binary and the image, starts both regions under a
// unique project name on free loopback ports and waits until all six
// nodes are ready. Everything it creates is removed when the test ends.
func startRig(t *testing.T) *rig {
	t.Helper()
	dockertest.SkipShort(t, "docker-regions: skipped with -short (builds an image and runs 6 containers)")
	compose := dockertest.ComposeCommand(t, "docker-regions", "no Docker engine answers")
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(here, "..", "..")
	uid, gid := dockertest.RuntimeIDs()
	tag := "platformd-regions:test-" + randHex(6)
	dockertest.BuildImage(t, root, here, tag, uid, gid, "eu.yaml", "us.yaml")
	ctl := buildPlatformctl(t, root)

	r := &rig{
		Project: dockertest.Project{
			Compose: compose,
			File:    filepath.Join(here, "compose.yaml"),
			Name:    "platformdregions" + randHex(4),
		},
		here:       here,
		ctl:        ctl,
		shared:     dockertest.SharedDir(t, uid, gid),
		natsPort:   map[string]int{},
		httpPort:   map[string]int{},
		containers: map[string]string{},
	}
	all := append(append([]string(nil), nodes["eu"]...), nodes["us"]...)
	ports := dockertest.FreePorts(t, 2*len(all))
	r.Env = append(os.Environ(),
		"PLATFORM_DOCKER_IMAGE="+tag,
		"PLATFORM_DOCKER_SHARED="+r.shared,
		"PLATFORM_DOCKER_RESTART=no",
	)
	for i, n := range all {
		r.natsPort[n], r.httpPort[n] = ports[2*i], ports[2*i+1]
		up := strings.ToUpper(n)
		r.Env = append(r.Env,
			fmt.Sprintf("PLATFORM_DOCKER_%s_NATS=%d", up, r.natsPort[n]),
			fmt.Sprintf("PLATFORM_DOCKER_%s_HTTP=%d", up, r.httpPort[n]))
	}

	start := time.Now()
	r.containers = r.Up(t, 60, all...)
	r.waitReady(t, 120*time.Second, all...)
	t.Logf("rig up (project %s, image %s, NATS ports %v, HTTP ports %v) and ready in %s",
		r.Name, tag, r.natsPort, r.httpPort, time.Since(start).Round(time.Millisecond))
	return r
}

// platformctl runs the platformctl binary with args and -o json against
// region's three nodes (their published ports, the shared admin creds) and
// decodes its output into out; the region's platformd serves the request
// on its control API (regions.peers names the other region).
func (r *rig) platformctl(t *testing.T, region string, out any, args ...string) {
	t.Helper()
	var urls []string
	for _, n := range nodes[region] {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", r.natsPort[n]))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	full := append([]string{"--server", strings.Join(urls, ","), "--creds", filepath.Join(r.shared, "creds", "admin.creds"), "--timeout", "60s"}, args...)
	cmd := exec.CommandContext(ctx, r.ctl, append(full, "-o", "json")...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("platformctl %s (against %s): %v\n%s%s", strings.Join(args, " "), region, err, stdout.String(), stderr.String())
	}
	if err := json.Unmarshal([]byte(stdout.String()), out); err != nil {
		t.Fatalf("platformctl %s: decode %q: %v", strings.Join(args, " "), stdout.String(), err)
	}
}

// buildPlatformctl builds the platformctl binary of the repository at root
// into a temporary directory.
func buildPlatformctl(t *testing.T, root string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "platformctl")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/platformctl")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build platformctl: %v\n%s", err, out)
	}
	return bin
}

// ids returns the container ids of region's nodes.
func (r *rig) ids(region string) []string {
	var out []string
	for _, n := range nodes[region] {
		out = append(out, r.containers[n])
	}
	return out
}

// docker runs `docker args...` bounded by 60 s.
func (r *rig) docker(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput(); err != nil {
		t.Fatalf("docker %v: %v\n%s", args, err, out)
	}
}

// linkNetwork is the compose network "link" of the project.
func (r *rig) linkNetwork() string { return r.Name + "_link" }

// cutLink disconnects the us nodes (the dialling side) from the link
// network and waits until neither region's JetStream answers from the
// other; clients keep their published ports (the link network is
// internal, it carries no published port).
func (r *rig) cutLink(t *testing.T, conns map[string]*nats.Conn) {
	t.Helper()
	for _, id := range r.ids("us") {
		r.docker(t, "network", "disconnect", r.linkNetwork(), id)
	}
	waitFor(t, 30*time.Second, "the link to be cut (neither region's JetStream answering from the other)", func() error {
		for _, region := range []string{"eu", "us"} {
			if probeDomain(conns[region], other(region)) == nil {
				return fmt.Errorf("domain %s still answers in %s", other(region), region)
			}
		}
		return nil
	})
}

// reconnectLink reconnects the us nodes to the link network and waits for
// the link.
func (r *rig) reconnectLink(t *testing.T, conns map[string]*nats.Conn) {
	t.Helper()
	for _, id := range r.ids("us") {
		r.docker(t, "network", "connect", r.linkNetwork(), id)
	}
	back := time.Now()
	r.waitLinked(t, conns, 60*time.Second)
	t.Logf("link reconnected and carrying the JetStream API in %s", time.Since(back).Round(time.Millisecond))
}

// connect connects as the platform admin to region's three published
// ports and checks that the nodes told the client no other address.
func (r *rig) connect(t *testing.T, region string) *nats.Conn {
	t.Helper()
	var urls []string
	for _, n := range nodes[region] {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", r.natsPort[n]))
	}
	nc, err := nats.Connect(strings.Join(urls, ","),
		nats.UserCredentials(filepath.Join(r.shared, "creds", "admin.creds")),
		nats.Name("docker-regions-test-"+region),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.Timeout(2*time.Second),
	)
	if err != nil {
		t.Fatalf("connect %s (%v): %v", region, urls, err)
	}
	t.Cleanup(nc.Close)
	if d := nc.DiscoveredServers(); len(d) > 0 {
		t.Fatalf("%s advertised addresses to the client: %v", region, d)
	}
	return nc
}

// natsCLI runs the real nats CLI (~/go/bin/nats, else nats on PATH)
// against region's published ports: `nats stream add NAME --config FILE`
// with cfg as the file (what a user bypassing the platform would type).
// It returns the CLI's output; a failure to create is fatal (mode node
// does not refuse it: see README.md).
func (r *rig) natsCLI(t *testing.T, region string, cfg jetstream.StreamConfig) []byte {
	t.Helper()
	bin := natsBinary(t)
	var urls []string
	for _, n := range nodes[region] {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", r.natsPort[n]))
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	// The JSON form of a cross-domain mirror: the domain's API prefix
	// (jetstream.StreamSource.Domain is not serialised; nats.go converts
	// it to this when it creates the stream itself).
	if m := cfg.Mirror; m != nil && m.Domain != "" {
		mm := *m
		mm.External, mm.Domain = &jetstream.ExternalStream{APIPrefix: "$JS." + m.Domain + ".API"}, ""
		cfg.Mirror = &mm
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), cfg.Name+".json")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--server", strings.Join(urls, ","),
		"--creds", filepath.Join(r.shared, "creds", "admin.creds"), "--timeout", "5s",
		"stream", "add", cfg.Name, "--config", file)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "NATS_CONTEXT=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s stream add %s --config %s in %s: %v\n%s", bin, cfg.Name, b, region, err, out)
	}
	return out
}

// natsBinary finds the nats CLI, or fails the test saying how to get it.
func natsBinary(t *testing.T) string {
	t.Helper()
	if home, err := os.UserHomeDir(); err == nil {
		if p := filepath.Join(home, "go", "bin", "nats"); fileExists(p) {
			return p
		}
	}
	if p, err := exec.LookPath("nats"); err == nil {
		return p
	}
	t.Fatalf("the nats CLI is needed (~/go/bin/nats or on PATH): go install github.com/nats-io/natscli/nats@latest")
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// probeDomain asks JetStream domain for its account info through nc
// (across the link when domain is the other region's).
func probeDomain(nc *nats.Conn, domain string) error {
	js, err := jetstream.NewWithDomain(nc, domain)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("domain %s: %w", domain, err)
	}
	return nil
}

// waitLinked waits until each region's JetStream answers through the
// leafnode link from the other (the cross-domain API mirrors use).
func (r *rig) waitLinked(t *testing.T, conns map[string]*nats.Conn, timeout time.Duration) {
	t.Helper()
	waitFor(t, timeout, "the leafnode link (each region's JetStream answers from the other)", func() error {
		return errors.Join(probeDomain(conns["us"], "eu"), probeDomain(conns["eu"], "us"))
	})
}

// waitReady polls /readyz on the published HTTP port of each node.
func (r *rig) waitReady(t *testing.T, timeout time.Duration, names ...string) {
	t.Helper()
	dockertest.WaitReady(t, timeout, fmt.Sprintf("%v ready (/readyz 200)", names), r.httpPort, names...)
}

// waitMirror waits until stream in js holds last seq >= want and returns
// how long that took.
func waitMirror(t *testing.T, js jetstream.JetStream, stream string, want uint64, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	waitFor(t, timeout, fmt.Sprintf("mirror %s at seq %d", stream, want), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.LastSeq < want {
			return fmt.Errorf("last seq %d", info.State.LastSeq)
		}
		return nil
	})
	return time.Since(start)
}

// readIDs reads every message of stream with an ordered consumer and
// returns the event ids (Nats-Msg-Id, else the payload), in order,
// leaving out platformd's canaries.
func readIDs(t *testing.T, js jetstream.JetStream, stream string) []string {
	t.Helper()
	ctx := bounded(t, 30*time.Second)
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatalf("stream %s info: %v", stream, err)
	}
	want := info.State.Msgs
	var ids []string
	if want == 0 {
		return ids
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatalf("ordered consumer on %s: %v", stream, err)
	}
	var read uint64
	for read < want {
		if ctx.Err() != nil {
			t.Fatalf("read %s: %d of %d messages: %v", stream, read, want, ctx.Err())
		}
		b, err := c.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatalf("read %s: %v", stream, err)
		}
		for m := range b.Messages() {
			read++
			if platform.IsCanary(m.Headers()) {
				continue // platformd's canary, published every canary.interval
			}
			id := m.Headers().Get(jetstream.MsgIDHeader)
			if id == "" {
				id = string(m.Data())
			}
			ids = append(ids, id)
		}
	}
	return ids
}

// assertExactlyOnce checks that got holds every id of want exactly once
// and nothing else.
func assertExactlyOnce(t *testing.T, where string, got, want []string) {
	t.Helper()
	count := make(map[string]int, len(got))
	for _, id := range got {
		count[id]++
	}
	var lost, dup, extra []string
	for _, id := range want {
		switch count[id] {
		case 0:
			lost = append(lost, id)
		case 1:
		default:
			dup = append(dup, fmt.Sprintf("%s x%d", id, count[id]))
		}
		delete(count, id)
	}
	for id := range count {
		extra = append(extra, id)
	}
	if len(lost)+len(dup)+len(extra) > 0 {
		t.Fatalf("%s: %d events, want %d exactly once: lost %d %v, duplicated %d %v, unexpected %d %v",
			where, len(got), len(want), len(lost), head(lost), len(dup), head(dup), len(extra), head(extra))
	}
}

func head(s []string) []string { return s[:min(5, len(s))] }

// coreCount subscribes to subject on nc and counts what arrives.
func coreCount(t *testing.T, nc *nats.Conn, subject string) (*nats.Subscription, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	sub, err := nc.Subscribe(subject, func(*nats.Msg) { n.Add(1) })
	if err != nil {
		t.Fatalf("subscribe %s: %v", subject, err)
	}
	if err := nc.FlushTimeout(5 * time.Second); err != nil {
		t.Fatalf("flush: %v", err)
	}
	return sub, &n
}

func newJS(t *testing.T, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// bounded returns a context cancelled after d or when the test ends.
func bounded(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitFor retries f every 200ms until it returns nil, failing the test
// with f's last error after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, f func() error) {
	t.Helper()
	dockertest.WaitFor(t, timeout, what, f)
}

func randHex(n int) string { return dockertest.RandHex(n) }
