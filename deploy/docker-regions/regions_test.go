package dockerregions_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/conf"
	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/dockertest"
	"github.com/msgplatform/platform/internal/tlsconf/tlstest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/region"
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
// Mirror, failover and failback, the residency refusals, the residency
// audit and the report are run with the platformctl binary against the
// control API of the region's own platformd nodes; events are published
// and read on one admin connection per region (its published loopback
// ports). First, each us node (the dialling side) must have derived and
// applied the link deny list from the resident topics of both regions
// (us.yaml lists none of them).
//
//  1. orders is mirrored eu -> us and invoices us -> eu; N events are
//     published to each of the four topics (resident and not, in both
//     regions); each mirror holds its topic's N exactly once.
//  2. Residency, for orders.eu and invoices.us: platformctl region mirror,
//     residency check (of a hand-made mirror) and region failover are
//     refused naming the topic and its region; a hand-made mirror created with the real nats
//     CLI (`nats stream add --config`, a cross-domain mirror) in the other
//     region is refused at the request by that region's residency gate
//     (the CLI exits non-zero, the stream never exists), which records
//     why in its audit stream (platformctl residency audit); a core
//     subscriber in the other region receives 0 events while one at home
//     receives them all; platformctl residency report, against each
//     region, lists every topic and finds no violation.
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
	checkLinkDeny(t, rig.Here)
	checkPeers(t, rig.Here)

	conns := map[string]*nats.Conn{"eu": rig.connect(t, "eu"), "us": rig.connect(t, "us")}
	js := map[string]jetstream.JetStream{"eu": newJS(t, conns["eu"]), "us": newJS(t, conns["us"])}
	rig.waitLinked(t, conns, 60*time.Second)
	checkDerivedLinkDeny(t, rig)
	rig.attackTransport(t, js["eu"])
	run := dockertest.RandHex(4)
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
		var ms region.MirrorStatus
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
	rogues := checkResidency(t, rig, js, conns, run, acked)

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
	var fo region.Failover
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
	bctx := natstest.Context(t, 60*time.Second)
	var fb region.Failback
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
// mirrors it tried (by resident topic; checked again at the end). The
// platform's refusals, its audit and its report are driven through the
// platformctl binary against the regions' platformd nodes (their control
// API); the hand-made mirror through the real nats CLI.
func checkResidency(t *testing.T, rig *rig, js map[string]jetstream.JetStream, conns map[string]*nats.Conn, run string, acked ledger) map[string]string {
	t.Helper()
	ctx := natstest.Context(t, 60*time.Second)
	rogues := map[string]string{}
	attempts, refused, carried := 0, 0, 0
	// refusedBy runs platformctl args against region and wants a
	// non-zero exit whose message names the resident topic and its region.
	refusedBy := func(what, region string, tp topicAt, args ...string) {
		t.Helper()
		attempts++
		stdout, stderr, err := rig.platformctlRun(region, args...)
		want := "topic " + tp.Name + " is resident in " + tp.Region
		if err == nil || !strings.Contains(stderr, want) {
			t.Fatalf("platformctl %s (against %s): want a non-zero exit naming %q, got %v\n%s%s", strings.Join(args, " "), region, want, err, stdout, stderr)
		}
		refused++
		t.Logf("2. %s: platformctl %s (against %s) refused: %s", what, strings.Join(args, " "), region, firstLine([]byte(stderr)))
	}
	for _, tp := range topics {
		if !tp.Resident {
			continue
		}
		away := other(tp.Region)
		refusedBy("platform mirror", tp.Region, tp, "region", "mirror", tp.Name, "--to", away)
		rogue := jetstream.StreamConfig{
			Name:   "rogue_" + platform.StreamName(tp.Name),
			Mirror: &jetstream.StreamSource{Name: platform.StreamName(tp.Name), Domain: tp.Region},
		}
		refusedBy("residency check of a hand-made mirror", away, tp, "residency", "check", "--region", away, "--config", streamConfigFile(t, rogue))
		refusedBy("failover", away, tp, "region", "failover", tp.Name, "--to", away)
		// Bypassing the platform: the real nats CLI against the other
		// region's JetStream API. The residency gate of that region's
		// platformd nodes refuses the request itself (the CLI exits
		// non-zero with the residency error, the stream never exists)
		// and records why (platformctl residency audit).
		attempts++
		out, err := rig.natsCLIOut(t, away, rogue)
		rogues[tp.Name] = rogue.Name
		t.Logf("2. nats stream add %s in %s (a mirror of %s in domain %s): %s", rogue.Name, away, platform.StreamName(tp.Name), tp.Region, strings.TrimSpace(string(out)))
		if err == nil || !strings.Contains(string(out), "residency: stream "+rogue.Name) {
			t.Fatalf("nats stream add %s in %s: want a non-zero exit with the residency error, got %v: %s", rogue.Name, away, err, out)
		}
		if _, err := js[away].Stream(ctx, rogue.Name); !errors.Is(err, jetstream.ErrStreamNotFound) {
			t.Fatalf("refused stream %s exists in %s (%v)", rogue.Name, away, err)
		}
		var ref region.Refusal
		dockertest.WaitFor(t, 20*time.Second, fmt.Sprintf("platformctl residency audit --region %s to list the gate's refusal of %s", away, rogue.Name), func() error {
			stdout, stderr, err := rig.platformctlRun(tp.Region, "residency", "audit", "--region", away, "-o", "json")
			if err != nil {
				return fmt.Errorf("%v: %s", err, stderr)
			}
			var audit []region.Refusal
			if err := json.Unmarshal([]byte(stdout), &audit); err != nil {
				return fmt.Errorf("decode %q: %v", stdout, err)
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
		if ref.Remedy != "refused" {
			t.Errorf("refusal of %s: remedy %q, want refused (at the request)", rogue.Name, ref.Remedy)
		}
		t.Logf("2. platformctl residency audit --region %s (against %s): the gate %s %s (%s): %v", away, tp.Region, ref.Remedy, rogue.Name, ref.Action, ref.Problems)
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
		dockertest.WaitFor(t, 10*time.Second, fmt.Sprintf("%d events of %s at the core subscriber at home", R, name), func() error {
			if n := c.home.Load(); n < R {
				return fmt.Errorf("%d", n)
			}
			return nil
		})
	}
	time.Sleep(3 * time.Second) // long enough for anything crossing the link to arrive
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
	// The auditors' report, from each region's platformd.
	for _, name := range []string{"eu", "us"} {
		stdout, stderr, err := rig.platformctlRun(name, "residency", "report", "-o", "json")
		if err != nil {
			t.Fatalf("platformctl residency report (against %s): %v\n%s%s", name, err, stdout, stderr)
		}
		var rep region.Report
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
			t.Fatalf("platformctl residency report: decode %q: %v", stdout, err)
		}
		if len(rep.Violations) != 0 {
			t.Errorf("platformctl residency report (against %s): %v", name, rep.Violations)
		}
		for _, tp := range topics {
			i := slices.IndexFunc(rep.Topics, func(r region.TopicResidency) bool { return r.Topic == tp.Name })
			if i < 0 || rep.Topics[i].Region != tp.Region || (rep.Topics[i].Residency != "") != tp.Resident || (tp.Resident && len(rep.Topics[i].Copies) != 0) {
				t.Errorf("platformctl residency report (against %s): topic %s not listed in %s with its residency and no copy of a resident topic: %+v", name, tp.Name, tp.Region, rep.Topics)
			}
		}
		t.Logf("2. platformctl residency report (against %s): %d topics and queues, no violations", name, len(rep.Topics))
	}
	t.Logf("2. residency: %d routes tried for 2 resident topics, %d refused by the platform, %d carried events across (want 0)", attempts, refused, carried)
	if t.Failed() {
		t.FailNow()
	}
	return rogues
}

// TestDockerRegionsConfig checks eu.yaml and us.yaml without Docker: they
// load, us's link lists none of the resident topics' subjects by hand
// (platformd derives them), and each names the other in regions.peers (the region operations
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
		c := loadConfig(t, here, me+".yaml")
		peer := other(me)
		var want []string
		for _, n := range nodes[peer] {
			want = append(want, "tls://"+n+"-peer:4222")
		}
		ps := c.Regions.Peers
		if len(ps) != 1 || ps[0].Name != peer || ps[0].Domain != peer || !slices.Equal(ps[0].URLs, want) || ps[0].Creds != "/shared/creds/admin.creds" {
			t.Fatalf("%s.yaml regions.peers = %+v; want region %s at %v with /shared/creds/admin.creds", me, ps, peer, want)
		}
	}
}

// checkLinkDeny checks the link of us.yaml: one leafnode remote dialling
// the three eu listeners, and no hand-written copy of the residency
// policy on it (platformd derives the deny list from the resident topics
// and queues of both regions; checkDerivedLinkDeny checks what it
// applied). The topics of the test are declared with the residency it
// expects.
func checkLinkDeny(t *testing.T, here string) {
	t.Helper()
	euc, usc := loadConfig(t, here, "eu.yaml"), loadConfig(t, here, "us.yaml")
	for _, tp := range topics {
		c := map[string]*conf.Config{"eu": euc, "us": usc}[tp.Region]
		s, ok := c.Catalog.Topics[tp.Name]
		if !ok || (s.Residency != "") != tp.Resident {
			t.Fatalf("%s.yaml: topic %s missing or its residency is not what the test expects (resident %v)", tp.Region, tp.Name, tp.Resident)
		}
	}
	if len(usc.Node.Leaf.Remotes) != 1 || len(usc.Node.Leaf.Remotes[0].URLs) != 3 {
		t.Fatalf("us.yaml: want one leaf remote with the three eu listeners, got %+v", usc.Node.Leaf.Remotes)
	}
	policy := map[string]bool{}
	for _, s := range region.LinkDeny(residentTopics(t, here)) {
		policy[s] = true
	}
	for _, s := range usc.Node.Leaf.Remotes[0].Deny {
		if policy[s] {
			t.Fatalf("us.yaml node.leaf.remotes[0].deny lists %q by hand; platformd derives the resident topics' subjects (the rig must show it does)", s)
		}
	}
}

// The TLS files the rig mounts at /tls are made for the test's own
// throw-away CA in a temporary directory, which the file's /tls/ paths
// are pointed to.
func loadConfig(t *testing.T, here, file string) *conf.Config {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(here, file))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "tls")
	if _, err := tlstest.WriteRig(dir, tlsHosts()...); err != nil {
		t.Fatal(err)
	}
	local := filepath.Join(t.TempDir(), file)
	if err := os.WriteFile(local, []byte(strings.ReplaceAll(string(b), "/tls/", dir+"/")), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := conf.Load(conf.LoadOptions{File: local, Env: []string{}})
	if err != nil {
		t.Fatalf("load %s: %v", file, err)
	}
	return c
}

// residentTopics are the resident topics of eu.yaml and us.yaml.
func residentTopics(t *testing.T, here string) []platform.TopicSpec {
	t.Helper()
	var out []platform.TopicSpec
	for _, f := range []string{"eu.yaml", "us.yaml"} {
		for _, s := range loadConfig(t, here, f).Catalog.Topics {
			if s.Residency != "" {
				out = append(out, s)
			}
		}
	}
	return out
}

// checkDerivedLinkDeny waits until every us node (the dialling side) has
// applied the link deny list platformd derives: us.yaml's configured
// subjects, region.LinkDeny of the resident topics of both regions
// (eu's read through the peer connection) and region.FixedLinkDeny,
// read from each node's /metrics.
func checkDerivedLinkDeny(t *testing.T, rig *rig) {
	t.Helper()
	usc := loadConfig(t, rig.Here, "us.yaml")
	resident := residentTopics(t, rig.Here)
	want := len(region.MergeDeny(usc.Node.Leaf.Remotes[0].Deny, region.LinkDeny(resident), region.FixedLinkDeny()))
	lines := []string{fmt.Sprintf("platform_region_link_deny_subjects %d", want)}
	for _, tp := range resident {
		lines = append(lines, fmt.Sprintf("platform_region_link_denied_resident{name=%q,region=%q} 1", tp.Name, tp.Residency))
	}
	for _, n := range nodes["us"] {
		dockertest.WaitFor(t, 60*time.Second, fmt.Sprintf("%s to apply the derived link deny list (%d subjects)", n, want), func() error {
			resp, err := dockertest.HTTPClient(t, rig.TLS).Get(fmt.Sprintf("https://127.0.0.1:%d/metrics", rig.HTTPPort[n]))
			if err != nil {
				return err
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				return err
			}
			for _, l := range lines {
				if !strings.Contains(string(body), l) {
					return fmt.Errorf("/metrics lacks %q", l)
				}
			}
			return nil
		})
	}
	t.Logf("link deny list derived and applied on %v: %d subjects (resident %d topics of both regions, none listed in us.yaml)", nodes["us"], want, len(resident))
}

// publish publishes n events to topic tp (keys <key>:HC-<i%7>), each with
// the event id prefix-<i> as Nats-Msg-Id and payload, waits for every ack
// and returns the ids.
func publish(t *testing.T, js jetstream.JetStream, tp topicAt, prefix string, n int) []string {
	t.Helper()
	ctx := natstest.Context(t, 60*time.Second)
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
	ctx := natstest.Context(t, 10*time.Second)
	_, info, err := dockertest.StreamInfo(ctx, js, stream)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s
}
