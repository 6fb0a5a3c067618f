package dockerregions_test

import (
	"context"
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

// The topics of eu.yaml: orders (not resident, mirrored to us) and
// orders.eu (resident in eu).
const (
	topic         = "orders"
	residentTopic = "orders.eu"
)

// services are the compose services, one node per region.
var services = map[string]string{"eu": "eu1", "us": "us1"}

// TestDockerRegions runs compose.yaml (region eu and region us, one
// platformd container each, linked by a leafnode on the compose network)
// and drives, from this process, the platform's region operations
// (platform.Regions: mirror, residency check, failover, failback) with
// one admin connection per region on its published loopback port, as
// platformd does in mode regions. Mode node serves no region operations
// on its control API (one node knows one region), see README.md.
//
//  1. orders is mirrored eu -> us; N events published in eu are in us.
//  2. orders.eu (residency eu): the platform refuses its mirror to us; a
//     hand-made JetStream mirror in us (what `nats stream add --mirror`
//     does, bypassing the platform) receives 0 of its events and the
//     residency report flags it; a core subscriber in us receives 0.
//  3. docker kill eu1; orders fails over to us; M events written in us.
//  4. eu1 restarted; orders fails back; eu holds every event id of the
//     N+M exactly once, and us mirrors eu again.
func TestDockerRegions(t *testing.T) {
	start := time.Now()
	rig := startRig(t)
	checkLinkDeny(t, rig.here)

	eu, us := rig.connect(t, "eu"), rig.connect(t, "us")
	jsEU, jsUS := newJS(t, eu), newJS(t, us)
	rig.waitLinked(t, eu, us, 60*time.Second)
	rs := platform.Regions{
		{Name: "eu", Domain: "eu", JS: jsEU},
		{Name: "us", Domain: "us", JS: jsUS},
	}
	run := randHex(4)

	// 1. Mirror orders to us; what eu acknowledges reaches us.
	ctx := bounded(t, 30*time.Second)
	ms, err := rs.Mirror(ctx, platform.MirrorRequest{Topic: topic, To: "us"})
	if err != nil {
		t.Fatalf("mirror %s to us: %v", topic, err)
	}
	const N = 300
	euIDs := publish(t, jsEU, topic, "eu-"+run, N)
	caught := waitMirror(t, jsUS, platform.StreamName(topic), N, 30*time.Second)
	got := readIDs(t, jsUS, platform.StreamName(topic))
	assertExactlyOnce(t, "us mirror", got, euIDs)
	t.Logf("1. mirror %s eu -> us (created %v): %d events published in eu, all %d in us exactly once, caught up %s after the last ack",
		topic, ms.Created, N, len(got), caught.Round(time.Millisecond))

	// 2. The resident topic never reaches us.
	attempts, refused := 0, 0
	attempts++
	if _, err := rs.Mirror(ctx, platform.MirrorRequest{Topic: residentTopic, To: "us"}); !errors.Is(err, platform.ErrResidency) {
		t.Fatalf("mirror of resident %s to us: err = %v, want ErrResidency", residentTopic, err)
	} else {
		refused++
		t.Logf("2a. platform mirror of %s to us refused: %v", residentTopic, err)
	}
	rogue := jetstream.StreamConfig{
		Name:   "rogue_orders_eu",
		Mirror: &jetstream.StreamSource{Name: platform.StreamName(residentTopic), Domain: "eu"},
	}
	attempts++
	if err := rs.CheckStream(ctx, "us", rogue); !errors.Is(err, platform.ErrResidency) {
		t.Fatalf("residency check of a hand-made mirror of %s in us: err = %v, want ErrResidency", residentTopic, err)
	} else {
		refused++
		t.Logf("2b. Regions.CheckStream (what the control API residency.check runs) of a hand-made mirror in us refused: %v", err)
	}
	// Bypassing the platform (the `nats` CLI talking to us's JetStream
	// API): node-mode platformd does not intercept it, the stream is
	// created, and the link's deny list must keep it empty.
	if _, err := jsUS.CreateStream(ctx, rogue); err != nil {
		t.Fatalf("create hand-made mirror in us: %v", err)
	}
	subUS, countUS := coreCount(t, us, residentTopic+".>")
	subEU, countEU := coreCount(t, eu, residentTopic+".>")
	const R = 100
	publish(t, jsEU, residentTopic, "res-"+run, R)
	waitFor(t, 10*time.Second, fmt.Sprintf("%d resident events at the eu core subscriber", R), func() error {
		if n := countEU.Load(); n < R {
			return fmt.Errorf("%d", n)
		}
		return nil
	})
	time.Sleep(3 * time.Second) // long enough for anything crossing the link to arrive
	rogueMsgs := streamMsgs(t, jsUS, rogue.Name)
	rep, err := rs.Report(ctx)
	if err != nil {
		t.Fatalf("residency report: %v", err)
	}
	flagged := slices.ContainsFunc(rep.Violations, func(v string) bool { return strings.Contains(v, rogue.Name) })
	t.Logf("2c. %d resident events published in eu: eu core subscriber got %d, us core subscriber got %d, hand-made mirror in us holds %d; residency report flags it: %v (%d violations)",
		R, countEU.Load(), countUS.Load(), rogueMsgs, flagged, len(rep.Violations))
	if countUS.Load() != 0 || rogueMsgs != 0 {
		t.Fatalf("resident events reached us: core subscriber %d, hand-made mirror %d", countUS.Load(), rogueMsgs)
	}
	if !flagged {
		t.Errorf("residency report does not flag the hand-made mirror %s in us: %v", rogue.Name, rep.Violations)
	}
	attempts += 2 // core subscription, hand-made JetStream mirror: carried 0
	t.Logf("2. residency: %d routes tried, %d refused by the platform, 2 carried 0 events", attempts, refused)
	_ = subUS.Unsubscribe()
	_ = subEU.Unsubscribe()
	if err := jsUS.DeleteStream(ctx, rogue.Name); err != nil {
		t.Fatalf("delete hand-made mirror: %v", err)
	}

	// 3. Lose eu, fail over to us, write there.
	rig.docker(t, "kill", rig.containers["eu"])
	killed := time.Now()
	fctx := bounded(t, 60*time.Second)
	fo, err := rs.Failover(fctx, platform.FailoverRequest{Topic: topic, To: "us"})
	if err != nil {
		t.Fatalf("failover %s to us with eu down: %v", topic, err)
	}
	t.Logf("3. eu1 killed; failover of %s to us in %s: origin reachable %v, mirror last seq %d, lag %d events / %.1fs, unreplicated %d, promoted at %d",
		topic, time.Since(killed).Round(time.Millisecond), fo.OriginReachable, fo.MirrorLastSeq, fo.LagEvents, fo.LagSeconds, fo.Unreplicated, fo.PromotedAtSeq)
	if fo.OriginReachable || fo.Unreplicated != 0 || fo.PromotedAtSeq != N {
		t.Fatalf("failover report: origin reachable %v, unreplicated %d, promoted at %d; want false, 0, %d", fo.OriginReachable, fo.Unreplicated, fo.PromotedAtSeq, N)
	}
	const M = 200
	usIDs := publish(t, jsUS, topic, "us-"+run, M)
	t.Logf("3. %d events written in us while eu is down", M)

	// 4. eu back, fail back: every event exactly once in eu.
	rig.docker(t, "start", rig.containers["eu"])
	restarted := time.Now()
	rig.waitReady(t, 90*time.Second, "eu")
	rig.waitLinked(t, eu, us, 60*time.Second)
	t.Logf("4. eu1 restarted, ready and linked in %s", time.Since(restarted).Round(time.Millisecond))
	bctx := bounded(t, 60*time.Second)
	fb, err := rs.Failback(bctx, platform.FailbackRequest{Topic: topic})
	if err != nil {
		t.Fatalf("failback %s: %v", topic, err)
	}
	t.Logf("4. failback %s %s -> %s: scanned %d, copied %d, deduplicated %d, origin-only %d; mirror in %s: %d messages, last seq %d, lag %d; notes %v",
		topic, fb.From, fb.To, fb.Scanned, fb.Copied, fb.Deduplicated, fb.OriginOnly, fb.Mirror.To, fb.Mirror.Messages, fb.Mirror.LastSeq, fb.Mirror.LagMessages, fb.Notes)
	if fb.To != "eu" || fb.Copied != M {
		t.Errorf("failback: to %s, copied %d; want eu, %d", fb.To, fb.Copied, M)
	}
	want := append(append([]string(nil), euIDs...), usIDs...)
	gotEU := readIDs(t, jsEU, platform.StreamName(topic))
	assertExactlyOnce(t, "eu after failback", gotEU, want)
	t.Logf("4. eu holds %d events: every one of the %d acknowledged (%d in eu, %d in us during the outage) exactly once, lost 0",
		len(gotEU), len(want), N, M)

	// us mirrors eu again.
	waitMirror(t, jsUS, platform.StreamName(topic), uint64(len(want)), 30*time.Second)
	assertExactlyOnce(t, "us mirror after failback", readIDs(t, jsUS, platform.StreamName(topic)), want)
	t.Logf("us mirrors eu again with all %d events; scenario took %s", len(want), time.Since(start).Round(time.Millisecond))
}

// checkLinkDeny fails when us.yaml's link deny list is not
// platform.LinkDeny of eu.yaml's resident topics (mode node does not
// derive it from the other region's catalog; it is written by hand).
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
	var topics []platform.TopicSpec
	for _, s := range euc.Catalog.Topics {
		topics = append(topics, s)
	}
	want := platform.LinkDeny(topics)
	if len(usc.Node.Leaf.Remotes) != 1 {
		t.Fatalf("us.yaml: want one leaf remote, got %d", len(usc.Node.Leaf.Remotes))
	}
	got := usc.Node.Leaf.Remotes[0].Deny
	slices.Sort(want)
	got = slices.Sorted(slices.Values(got))
	if !slices.Equal(got, want) {
		t.Fatalf("us.yaml node.leaf.remotes[0].deny drifted from platform.LinkDeny(eu.yaml resident topics):\n got %q\nwant %q", got, want)
	}
}

// publish publishes n events to topic (keys order:HC-<i%7>), each with
// the event id prefix-<i> as Nats-Msg-Id and payload, and returns the ids.
func publish(t *testing.T, js jetstream.JetStream, topic, prefix string, n int) []string {
	t.Helper()
	ctx := bounded(t, 60*time.Second)
	ids := make([]string, 0, n)
	futures := make([]jetstream.PubAckFuture, 0, n)
	for i := range n {
		id := fmt.Sprintf("%s-%d", prefix, i)
		m := nats.NewMsg(fmt.Sprintf("%s.order:HC-%d", topic, i%7))
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

// streamMsgs returns how many messages stream holds.
func streamMsgs(t *testing.T, js jetstream.JetStream, stream string) uint64 {
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
	return info.State.Msgs
}

// readIDs reads every message of stream with an ordered consumer and
// returns the event ids (Nats-Msg-Id, else the payload), in order.
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
	for uint64(len(ids)) < want {
		if ctx.Err() != nil {
			t.Fatalf("read %s: %d of %d messages: %v", stream, len(ids), want, ctx.Err())
		}
		b, err := c.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatalf("read %s: %v", stream, err)
		}
		for m := range b.Messages() {
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

// rig is a running compose project of compose.yaml.
type rig struct {
	dockertest.Project
	here       string
	shared     string
	natsPort   map[string]int // region -> host port
	httpPort   map[string]int
	containers map[string]string // region -> container id
}

// startRig builds the binary and the image, starts both regions under a
// unique project name on free loopback ports and waits until both are
// ready. Everything it creates is removed when the test ends.
func startRig(t *testing.T) *rig {
	t.Helper()
	dockertest.SkipShort(t, "docker-regions: skipped with -short (builds an image and runs 2 containers)")
	compose := dockertest.ComposeCommand(t, "docker-regions", "no Docker engine answers")
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(here, "..", "..")
	uid, gid := dockertest.RuntimeIDs()
	tag := "platformd-regions:test-" + randHex(6)
	dockertest.BuildImage(t, root, here, tag, uid, gid, "eu.yaml", "us.yaml")

	r := &rig{
		Project: dockertest.Project{
			Compose: compose,
			File:    filepath.Join(here, "compose.yaml"),
			Name:    "platformdregions" + randHex(4),
		},
		here:       here,
		shared:     dockertest.SharedDir(t, uid, gid),
		natsPort:   map[string]int{},
		httpPort:   map[string]int{},
		containers: map[string]string{},
	}
	ports := dockertest.FreePorts(t, 4)
	r.natsPort["eu"], r.httpPort["eu"], r.natsPort["us"], r.httpPort["us"] = ports[0], ports[1], ports[2], ports[3]
	r.Env = append(os.Environ(),
		"PLATFORM_DOCKER_IMAGE="+tag,
		"PLATFORM_DOCKER_SHARED="+r.shared,
		"PLATFORM_DOCKER_RESTART=no",
		fmt.Sprintf("PLATFORM_DOCKER_EU_NATS=%d", r.natsPort["eu"]),
		fmt.Sprintf("PLATFORM_DOCKER_EU_HTTP=%d", r.httpPort["eu"]),
		fmt.Sprintf("PLATFORM_DOCKER_US_NATS=%d", r.natsPort["us"]),
		fmt.Sprintf("PLATFORM_DOCKER_US_HTTP=%d", r.httpPort["us"]),
	)

	start := time.Now()
	ids := r.Up(t, 200, services["eu"], services["us"])
	for region, svc := range services {
		r.containers[region] = ids[svc]
	}
	r.waitReady(t, 90*time.Second, "eu", "us")
	t.Logf("rig up (project %s, image %s, NATS ports %v, HTTP ports %v) and ready in %s",
		r.Name, tag, r.natsPort, r.httpPort, time.Since(start).Round(time.Millisecond))
	return r
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

// connect connects as the platform admin to region's published port and
// checks that the node told the client no other address.
func (r *rig) connect(t *testing.T, region string) *nats.Conn {
	t.Helper()
	url := fmt.Sprintf("nats://127.0.0.1:%d", r.natsPort[region])
	nc, err := nats.Connect(url,
		nats.UserCredentials(filepath.Join(r.shared, "creds", "admin.creds")),
		nats.Name("docker-regions-test-"+region),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250*time.Millisecond),
		nats.Timeout(2*time.Second),
	)
	if err != nil {
		t.Fatalf("connect %s (%s): %v", region, url, err)
	}
	t.Cleanup(nc.Close)
	if d := nc.DiscoveredServers(); len(d) > 0 {
		t.Fatalf("%s advertised addresses to the client: %v", region, d)
	}
	return nc
}

// waitLinked waits until each region's JetStream answers through the
// leafnode link from the other (the cross-domain API mirrors use).
func (r *rig) waitLinked(t *testing.T, eu, us *nats.Conn, timeout time.Duration) {
	t.Helper()
	probe := func(nc *nats.Conn, domain string) error {
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
	waitFor(t, timeout, "the leafnode link (each region's JetStream answers from the other)", func() error {
		return errors.Join(probe(us, "eu"), probe(eu, "us"))
	})
}

// waitReady polls /readyz on the published HTTP port of each region.
func (r *rig) waitReady(t *testing.T, timeout time.Duration, regions ...string) {
	t.Helper()
	dockertest.WaitReady(t, timeout, fmt.Sprintf("%v ready (/readyz 200)", regions), r.httpPort, regions...)
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
