package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/conf"
	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/daemon"
	"github.com/msgplatform/platform/internal/daemon/daemontest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/platform/region"
)

// startRegionsDaemon runs platformd in mode regions: eu (home) and us, one
// node each, orders.eu resident in eu and orders not resident.
func startRegionsDaemon(t *testing.T) (*daemon.Daemon, *nats.Conn) {
	t.Helper()
	d, _ := daemontest.StartRetrying(t, nil, func() conf.Config {
		cfg := daemontest.RegionsConfig(t)
		cfg.HTTP.Listen = "127.0.0.1:0"
		eu, orders := platform.DefaultTopicSpec("orders.eu"), platform.DefaultTopicSpec("orders")
		eu.Partitions, eu.Replicas, eu.Residency = 2, 1, "eu"
		orders.Partitions, orders.Replicas = 2, 1
		cfg.Catalog = platform.Catalog{Topics: map[string]platform.TopicSpec{"orders.eu": eu, "orders": orders}}
		return cfg
	})
	return d, daemontest.Admin(t, d.Trust(), d.Nodes()[0].ClientURL())
}

// TestRegionsControlAPI: the control API refuses a resident mirror with a
// conflict naming the region, mirrors a non-resident topic, creates a
// topic resident in us in us, reports residency and exports mirror lag.
func TestRegionsControlAPI(t *testing.T) {
	d, nc := startRegionsDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()

	err := control.Call(ctx, nc, region.SubjMirror, region.MirrorRequest{Topic: "orders.eu", To: "us"}, nil)
	if !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), "resident in eu") {
		t.Fatalf("resident mirror: want a 409 naming eu, got %v", err)
	}
	var st region.MirrorStatus
	if err := control.Call(ctx, nc, region.SubjMirror, region.MirrorRequest{Topic: "orders", To: "us"}, &st); err != nil {
		t.Fatalf("mirror orders: %v", err)
	}
	if st.From != "eu" || st.To != "us" {
		t.Errorf("mirror status %+v", st)
	}

	// A topic resident in us is created in us, not in the home region.
	us := platform.DefaultTopicSpec("payments.us")
	us.Replicas, us.Residency = 1, "us"
	if err := control.Call(ctx, nc, control.SubjTopicApply, control.ApplyTopicRequest{Spec: us}, nil); err != nil {
		t.Fatalf("apply payments.us: %v", err)
	}
	var rep region.Report
	if err := control.Call(ctx, nc, region.SubjReport, nil, &rep); err != nil {
		t.Fatal(err)
	}
	where := map[string]string{}
	for _, tr := range rep.Topics {
		where[tr.Topic] = tr.Region
	}
	if where["payments.us"] != "us" || where["orders.eu"] != "eu" || where["orders"] != "eu" || len(rep.Violations) != 0 {
		t.Errorf("report %+v", rep)
	}

	_, body := daemontest.HTTPGet(t, d, "/metrics")
	if !strings.Contains(body, `platform_mirror_lag_messages{from="eu",to="us",topic="orders"}`) {
		t.Errorf("metrics lack platform_mirror_lag_messages for orders")
	}
	if !strings.Contains(body, "platform_mirror_lag_seconds") {
		t.Errorf("metrics lack platform_mirror_lag_seconds")
	}
}

// TestRegionsResidencyGuard: a mirror of the resident orders.eu made in us
// directly through the JetStream API (bypassing the control API) is
// refused at the request by platformd's residency gate: the requester gets
// a JetStream API error naming the topic and its region, the stream never
// exists, and us's audit holds the refusal (remedy "refused").
func TestRegionsResidencyGuard(t *testing.T) {
	d, nc := startRegionsDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	// us reached through the link (domain us): the test holds only a
	// connection to the home region.
	jsUS, err := jetstream.NewWithDomain(nc, "us")
	if err != nil {
		t.Fatal(err)
	}
	jsEU := natstest.JetStream(t, nc)
	rogue := jetstream.StreamConfig{Name: "rogue_orders_eu", Mirror: &jetstream.StreamSource{Name: platform.StreamName("orders.eu"), Domain: "eu"}}
	_, err = jsUS.CreateStream(ctx, rogue)
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != region.GateErrCode || !strings.Contains(apiErr.Description, "topic orders.eu is resident in eu") {
		t.Fatalf("create hand-made mirror in us: want the residency gate's APIError naming orders.eu and eu, got %T %v", err, err)
	}
	if _, err := jsUS.Stream(ctx, rogue.Name); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("refused mirror exists in us: %v", err)
	}
	rs := region.Regions{{Name: "eu", Domain: "eu", JS: jsEU}, {Name: "us", Domain: "us", JS: jsUS}}
	deadline := time.Now().Add(15 * time.Second)
	for {
		audit, aerr := rs.Audit(ctx, "us")
		if aerr == nil && len(audit) == 1 {
			if audit[0].Stream != rogue.Name || audit[0].Remedy != "refused" || audit[0].Action != "create" || !strings.Contains(strings.Join(audit[0].Problems, ";"), "topic orders.eu is resident in eu") {
				t.Fatalf("audit record %+v", audit[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no audit record of the refusal in us: %v (%v)", audit, aerr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	_, body := daemontest.HTTPGet(t, d, "/metrics")
	if !strings.Contains(body, "platform_residency_refused_requests_total 1") {
		t.Errorf("metrics lack platform_residency_refused_requests_total 1")
	}
	// A legitimate hand-made stream still passes the gate.
	if _, err := jsUS.CreateStream(ctx, jetstream.StreamConfig{Name: "us_plain", Subjects: []string{"us.plain.>"}}); err != nil {
		t.Fatalf("plain stream in us through the gate: %v", err)
	}
}

// nodeRegion runs a mode-node platformd of region name (one node, R1) on
// port with the shared trust, its catalog and peers.
func nodeRegion(t *testing.T, trust *embeddednats.Trust, name string, port int, cat platform.Catalog, peers []conf.PeerRegion, leaf embeddednats.Leaf) *daemon.Daemon {
	t.Helper()
	cfg := daemontest.NodeRegionConfig(t, trust, name, port, cat, peers)
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.Node.Leaf = leaf
	return daemontest.StartConfig(t, cfg)
}

// linkRig is the shared trust and free ports of two mode-node regions,
// each the other's peer region: eu listens for the leafnode link on
// leafPort, us dials it.
type linkRig struct {
	trust                    *embeddednats.Trust
	euPort, usPort, leafPort int
}

func newLinkRig(t *testing.T) linkRig {
	t.Helper()
	trust, err := embeddednats.NewTrust()
	if err != nil {
		t.Fatal(err)
	}
	ports := natstest.FreePorts(t, 3)
	return linkRig{trust: trust, euPort: ports[0], usPort: ports[1], leafPort: ports[2]}
}

// eu starts region eu with catalog cat, listening for the link.
func (r linkRig) eu(t *testing.T, cat platform.Catalog) *daemon.Daemon {
	t.Helper()
	return nodeRegion(t, r.trust, "eu", r.euPort, cat,
		[]conf.PeerRegion{{Name: "us", URLs: []string{fmt.Sprintf("nats://127.0.0.1:%d", r.usPort)}}},
		embeddednats.Leaf{Host: "127.0.0.1", Port: r.leafPort})
}

// us starts region us with catalog cat, dialling eu's link with deny as
// its configured deny list.
func (r linkRig) us(t *testing.T, cat platform.Catalog, deny ...string) *daemon.Daemon {
	t.Helper()
	return nodeRegion(t, r.trust, "us", r.usPort, cat,
		[]conf.PeerRegion{{Name: "eu", URLs: []string{fmt.Sprintf("nats://127.0.0.1:%d", r.euPort)}}},
		embeddednats.Leaf{Remotes: []embeddednats.LeafRemote{{URLs: []string{fmt.Sprintf("nats-leaf://127.0.0.1:%d", r.leafPort)}, Deny: deny}}})
}

// r1Topic is an R1 topic name of residency ("" for none).
func r1Topic(name, residency string) platform.TopicSpec {
	tp := platform.DefaultTopicSpec(name)
	tp.Replicas, tp.Residency = 1, residency
	return tp
}

// crossed subscribes on sub (one region) to subject, publishes n core
// messages to pubSubj on pub (the other region) and returns how many the
// subscriber received.
func crossed(t *testing.T, sub, pub *nats.Conn, subject, pubSubj string, n int) int {
	t.Helper()
	ch := make(chan *nats.Msg, n)
	s, err := sub.ChanSubscribe(subject, ch)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Unsubscribe()
	if err := sub.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the subscription's interest crosses (if allowed)
	for i := range n {
		if err := pub.Publish(fmt.Sprintf("%s%d", pubSubj, i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := pub.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	return len(ch)
}

// TestNodeModeLinkDenyDerived: two mode-node platformds, eu (listening)
// and us (dialling eu, its YAML deny list holding only an extra subject,
// none of the resident objects'), peers of each other. us derives its
// link deny list from policy: eu's resident topic orders.eu and queue
// jobs.eu (read through the peer connection), its own resident
// invoices.us, a resident topic applied later through eu's control API
// (payments.eu) and one applied through us's (receipts.us), and the gate's
// forward subject; the configured subject stays. A core subscriber across
// the link receives 0 of their messages while a non-resident topic's do
// cross, and a hand-made mirror in us of the resident topic and queue is
// refused at the request. The effective list is exported as a metric.
func TestNodeModeLinkDenyDerived(t *testing.T) {
	rig := newLinkRig(t)
	jobs := platform.DefaultQueueSpec("jobs.eu")
	jobs.Replicas, jobs.Residency = 1, "eu"
	euCat := platform.Catalog{
		Topics: map[string]platform.TopicSpec{"orders.eu": r1Topic("orders.eu", "eu"), "orders": r1Topic("orders", "")},
		Queues: map[string]platform.QueueSpec{"jobs.eu": jobs},
	}
	usCat := platform.Catalog{Topics: map[string]platform.TopicSpec{"invoices.us": r1Topic("invoices.us", "us")}}
	eu := rig.eu(t, euCat)
	const extra = "audit.secret.>"
	us := rig.us(t, usCat, extra)

	ncEU := daemontest.Admin(t, rig.trust, eu.Nodes()[0].ClientURL())
	ncUS := daemontest.Admin(t, rig.trust, us.Nodes()[0].ClientURL(), nats.MaxReconnects(-1))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	hasAll := func(names ...string) error {
		got := map[string]bool{}
		for _, s := range us.LinkDeny() {
			got[s] = true
		}
		want := append([]string{extra}, region.FixedLinkDeny()...)
		for _, n := range names {
			want = append(want, region.ResidentDeny(n)...)
		}
		for _, s := range want {
			if !got[s] {
				return fmt.Errorf("us link deny list lacks %q (has %d subjects)", s, len(got))
			}
		}
		return nil
	}
	natstest.WaitFor(t, 30*time.Second, func() error { return hasAll("orders.eu", "jobs.eu", "invoices.us") })
	natstest.WaitFor(t, 60*time.Second, func() error { return linkedTo(ctx, ncUS, "eu") })

	type crossing struct {
		sub, pub      *nats.Conn
		subject, pubs string
	}
	attempts, crossings := 0, 0
	// noneCross: a core subscriber on each subject across the link
	// receives none of 20 messages.
	noneCross := func(cs ...crossing) {
		t.Helper()
		for _, c := range cs {
			attempts++
			if got := crossed(t, c.sub, c.pub, c.subject, c.pubs, 20); got != 0 {
				crossings++
				t.Errorf("core subscriber on %s across the link received %d of 20 messages", c.subject, got)
			}
		}
	}
	// onlyPolicyCrosses: core subscribers across the link receive nothing
	// of cs, and the link carries what policy allows: all 20 messages of
	// the non-resident topic.
	onlyPolicyCrosses := func(when string, cs ...crossing) {
		t.Helper()
		noneCross(cs...)
		if got := crossed(t, ncUS, ncEU, "orders.>", "orders.order:K-", 20); got != 20 {
			t.Fatalf("non-resident orders across the link %s: received %d of 20; the link does not carry", when, got)
		}
	}
	// Core subscribers across the link, both directions: 0 received.
	onlyPolicyCrosses("at first",
		crossing{ncUS, ncEU, "orders.eu.>", "orders.eu.order:K-"},
		crossing{ncUS, ncEU, "jobs.eu.>", "jobs.eu.job-"},
		crossing{ncUS, ncEU, "$DLQ.orders_eu.>", "$DLQ.orders_eu.c."},
		crossing{ncEU, ncUS, "invoices.us.>", "invoices.us.invoice:I-"},
	)

	// Hand-made mirrors in us of eu's resident topic and queue (and their
	// DLQ stream): refused at the request.
	jsUS := natstest.JetStream(t, ncUS)
	for _, src := range []string{"orders_eu", "jobs_eu", "jobs_eu_dlq"} {
		attempts++
		rogue := jetstream.StreamConfig{Name: "rogue_" + src, Mirror: &jetstream.StreamSource{Name: src, Domain: "eu"}}
		_, err := jsUS.CreateStream(ctx, rogue)
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) || apiErr.ErrorCode != region.GateErrCode || !strings.Contains(apiErr.Description, "is resident in eu") {
			crossings++
			t.Errorf("hand-made mirror of %s in us: want the gate's refusal, got %T %v", src, err, err)
		}
	}

	// Resident topics applied later, through either region's control API,
	// join the list without a YAML change or restart.
	var ch catalog.Change
	if err := control.Call(ctx, ncEU, control.SubjTopicApply, control.ApplyTopicRequest{Spec: r1Topic("payments.eu", "eu")}, &ch); err != nil {
		t.Fatalf("apply payments.eu in eu: %v", err)
	}
	if err := control.Call(ctx, ncUS, control.SubjTopicApply, control.ApplyTopicRequest{Spec: r1Topic("receipts.us", "us")}, &ch); err != nil {
		t.Fatalf("apply receipts.us in us: %v", err)
	}
	natstest.WaitFor(t, 30*time.Second, func() error { return hasAll("orders.eu", "jobs.eu", "invoices.us", "payments.eu", "receipts.us") })
	natstest.WaitFor(t, 60*time.Second, func() error { return linkedTo(ctx, ncUS, "eu") })
	onlyPolicyCrosses("after the update",
		crossing{ncUS, ncEU, "payments.eu.>", "payments.eu.p:"},
		crossing{ncEU, ncUS, "receipts.us.>", "receipts.us.r:"},
		crossing{ncUS, ncEU, "orders.eu.>", "orders.eu.order:K-"},
	)

	// A copy of the resident orders.eu made by hand in eu (the listening
	// side) is on us's link deny list once its create returns: the gate
	// had us confirm it first. Its stream is not read from us.
	jsEU := natstest.JetStream(t, ncEU)
	if _, err := jsEU.Publish(ctx, "orders.eu.order:K-copy", []byte("resident")); err != nil {
		t.Fatal(err)
	}
	if _, err := jsEU.CreateStream(ctx, jetstream.StreamConfig{Name: "orders_eu_copy", Replicas: 1, Sources: []*jetstream.StreamSource{{Name: "orders_eu"}}}); err != nil {
		t.Fatalf("in-region copy of orders.eu: %v", err)
	}
	if err := hasAll(region.ResidentStreamEntry + "orders_eu_copy"); err != nil {
		t.Fatalf("right after the copy's create: %v", err)
	}
	natstest.WaitFor(t, 60*time.Second, func() error { return linkedTo(ctx, ncUS, "eu") })
	jsUSeu, err := jetstream.NewWithDomain(ncUS, "eu")
	if err != nil {
		t.Fatal(err)
	}
	attempts++
	if s, err := jsUSeu.Stream(ctx, "orders_eu_copy"); err == nil {
		if m, err := s.GetMsg(ctx, 1); err == nil {
			crossings++
			t.Errorf("the copy's message read from us: %q", m.Data)
		}
	}

	_, body := daemontest.HTTPGet(t, us, "/metrics")
	want := fmt.Sprintf("platform_region_link_deny_subjects %d", len(us.LinkDeny()))
	if !strings.Contains(body, want) || !strings.Contains(body, `platform_region_link_denied_resident{name="jobs.eu",region="eu"} 1`) {
		t.Errorf("us metrics lack %q or jobs.eu's platform_region_link_denied_resident", want)
	}
	if eu.LinkDeny() != nil {
		t.Errorf("eu (no remotes) has a link deny list: %v", eu.LinkDeny())
	}
	t.Logf("%d cross-border attempts (core subscriptions and hand-made mirrors), %d crossed; us link deny list: %d subjects", attempts, crossings, len(us.LinkDeny()))
}

// linkedTo reports nil once domain's JetStream answers on nc through the
// leafnode link.
func linkedTo(ctx context.Context, nc *nats.Conn, domain string) error {
	js, err := jetstream.NewWithDomain(nc, domain)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = js.AccountInfo(cctx)
	return err
}

// TestNodeModeLinkDenyListeningSide: a resident topic created through the
// control API of the region that listens for the link (eu; us dials) is on
// the dialling side's deny list before the stream exists. A core
// subscriber in us, subscribed before the create, receives 0 of 200
// events published in eu right after the apply returns, while a
// non-resident topic created the same way crosses (200 of 200). With us
// gone, a resident topic applied in eu is refused with an error naming
// us, and its stream does not exist.
func TestNodeModeLinkDenyListeningSide(t *testing.T) {
	rig := newLinkRig(t)
	eu := rig.eu(t, platform.Catalog{})
	us := rig.us(t, platform.Catalog{})
	ncEU := daemontest.Admin(t, rig.trust, eu.Nodes()[0].ClientURL())
	ncUS := daemontest.Admin(t, rig.trust, us.Nodes()[0].ClientURL(), nats.MaxReconnects(-1))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	jsEU := natstest.JetStream(t, ncEU)
	natstest.WaitFor(t, 60*time.Second, func() error { return linkedTo(ctx, ncUS, "eu") })

	// createThenPublish subscribes in us on name's subjects, creates the
	// topic through eu's control API, publishes n events in eu right after
	// the apply returns and reports how many the us subscriber received.
	const n = 200
	createThenPublish := func(spec platform.TopicSpec) int {
		t.Helper()
		ch := make(chan *nats.Msg, n)
		s, err := ncUS.ChanSubscribe(spec.Name+".>", ch)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Unsubscribe()
		if err := ncUS.Flush(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // the subscription's interest crosses
		var c catalog.Change
		if err := control.Call(ctx, ncEU, control.SubjTopicApply, control.ApplyTopicRequest{Spec: spec}, &c); err != nil {
			t.Fatalf("apply %s in eu: %v", spec.Name, err)
		}
		for i := range n {
			if err := ncEU.Publish(fmt.Sprintf("%s.e:%d", spec.Name, i), []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		if err := ncEU.Flush(); err != nil {
			t.Fatal(err)
		}
		// The events are in the topic in eu.
		natstest.WaitFor(t, 10*time.Second, func() error {
			s, err := jsEU.Stream(ctx, platform.StreamName(spec.Name))
			if err != nil {
				return err
			}
			if got := s.CachedInfo().State.Msgs; got != n {
				return fmt.Errorf("%s holds %d of %d events in eu", spec.Name, got, n)
			}
			return nil
		})
		time.Sleep(2 * time.Second)
		return len(ch)
	}

	// A non-resident topic created the same way crosses.
	if got := createThenPublish(r1Topic("open", "")); got != n {
		t.Fatalf("non-resident open created in eu: the us subscriber received %d of %d; the link does not carry", got, n)
	}
	// The resident one: 0 from the first event on.
	if got := createThenPublish(r1Topic("fresh.eu", "eu")); got != 0 {
		t.Errorf("resident fresh.eu created in eu: the us subscriber (subscribed before the create) received %d of %d events", got, n)
	}
	have := map[string]bool{}
	for _, s := range us.LinkDeny() {
		have[s] = true
	}
	for _, s := range region.ResidentDeny("fresh.eu") {
		if !have[s] {
			t.Errorf("us link deny list lacks %q", s)
		}
	}
	// A resident queue applied in eu: on us's list when the apply returns.
	work := platform.DefaultQueueSpec("work.eu")
	work.Replicas, work.Residency = 1, "eu"
	var qc catalog.Change
	if err := control.Call(ctx, ncEU, control.SubjQueueApply, control.ApplyQueueRequest{Spec: work}, &qc); err != nil {
		t.Fatalf("apply queue work.eu in eu: %v", err)
	}
	for _, s := range us.LinkDeny() {
		have[s] = true
	}
	for _, s := range region.ResidentDeny("work.eu") {
		if !have[s] {
			t.Errorf("us link deny list lacks %q when eu's queue apply returns", s)
		}
	}
	// The link still carries what policy allows.
	natstest.WaitFor(t, 60*time.Second, func() error { return linkedTo(ctx, ncUS, "eu") })
	if got := crossed(t, ncUS, ncEU, "open.>", "open.again:", 20); got != 20 {
		t.Fatalf("non-resident open after the resident create: received %d of 20", got)
	}

	// us gone: a resident topic applied in eu is refused, nothing created;
	// a non-resident one is unaffected.
	cctx, ccancel := context.WithTimeout(ctx, 20*time.Second)
	if err := us.Close(cctx); err != nil {
		t.Fatalf("close us: %v", err)
	}
	ccancel()
	start := time.Now()
	var c catalog.Change
	err := control.Call(ctx, ncEU, control.SubjTopicApply, control.ApplyTopicRequest{Spec: r1Topic("secret.eu", "eu")}, &c)
	if err == nil || !strings.Contains(err.Error(), "peer region us") || !strings.Contains(err.Error(), "nothing was changed") || !strings.Contains(err.Error(), "secret.eu") {
		t.Fatalf("resident secret.eu with us unreachable: want a refusal naming us and secret.eu, got %v", err)
	}
	t.Logf("refused in %s: %v", time.Since(start).Round(time.Millisecond), err)
	if _, err := jsEU.Stream(ctx, platform.StreamName("secret.eu")); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("secret.eu refused, yet its stream lookup in eu answers %v (want not found)", err)
	}
	if err := control.Call(ctx, ncEU, control.SubjTopicApply, control.ApplyTopicRequest{Spec: r1Topic("open2", "")}, &c); err != nil {
		t.Fatalf("non-resident open2 with us unreachable: %v", err)
	}
	// A topic or queue resident in another region is refused here: its
	// events would be stored in eu.
	err = control.Call(ctx, ncEU, control.SubjTopicApply, control.ApplyTopicRequest{Spec: r1Topic("foreign.us", "us")}, &c)
	if err == nil || !strings.Contains(err.Error(), `residency "us" is not this platformd's region "eu"`) {
		t.Fatalf("topic resident in us applied in eu: want a refusal naming both regions, got %v", err)
	}
	if _, err := jsEU.Stream(ctx, platform.StreamName("foreign.us")); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("foreign.us refused, yet its stream lookup in eu answers %v (want not found)", err)
	}
	q := platform.DefaultQueueSpec("foreign-jobs")
	q.Residency = "us"
	err = control.Call(ctx, ncEU, control.SubjQueueApply, control.ApplyQueueRequest{Spec: q}, &c)
	if err == nil || !strings.Contains(err.Error(), `residency "us" is not this platformd's region "eu"`) {
		t.Fatalf("queue resident in us applied in eu: want a refusal naming both regions, got %v", err)
	}
}

// TestNodeModeLinkDenyListeningCatalog: the listening region's (eu's)
// catalog holds a resident topic; us, which dials eu, runs first with a
// core subscriber on its subjects. When eu starts, us denies the topic
// before eu's catalog is reconciled: 0 of the events published in eu as
// soon as the topic's stream exists, right after eu's start and once the
// link is up reach us; the catalog's non-resident topic crosses.
func TestNodeModeLinkDenyListeningCatalog(t *testing.T) {
	rig := newLinkRig(t)
	us := rig.us(t, platform.Catalog{})
	ncUS := daemontest.Admin(t, rig.trust, us.Nodes()[0].ClientURL(), nats.MaxReconnects(-1))
	const n = 200
	resident := make(chan *nats.Msg, 3*n)
	if _, err := ncUS.ChanSubscribe("cat.eu.>", resident); err != nil {
		t.Fatal(err)
	}
	open := make(chan *nats.Msg, n)
	if _, err := ncUS.ChanSubscribe("catopen.>", open); err != nil {
		t.Fatal(err)
	}
	if err := ncUS.Flush(); err != nil {
		t.Fatal(err)
	}

	// As soon as eu's catalog has created cat.eu, publish n events to it
	// (during eu's start).
	early := make(chan error, 1)
	go func() {
		early <- func() error {
			deadline := time.Now().Add(60 * time.Second)
			var nc *nats.Conn
			for nc == nil {
				if time.Now().After(deadline) {
					return errors.New("eu never answered")
				}
				c, err := embeddednats.ConnectAdmin(rig.trust, fmt.Sprintf("nats://127.0.0.1:%d", rig.euPort))
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				nc = c
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				return err
			}
			for {
				if time.Now().After(deadline) {
					return errors.New("cat.eu never created in eu")
				}
				if _, err := js.Stream(context.Background(), platform.StreamName("cat.eu")); err == nil {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			for i := range n {
				if err := nc.Publish(fmt.Sprintf("cat.eu.created:%d", i), []byte("x")); err != nil {
					return err
				}
			}
			return nc.Flush()
		}()
	}()
	eu := rig.eu(t, platform.Catalog{Topics: map[string]platform.TopicSpec{
		"cat.eu": r1Topic("cat.eu", "eu"), "catopen": r1Topic("catopen", ""),
	}})
	ncEU := daemontest.Admin(t, rig.trust, eu.Nodes()[0].ClientURL())
	publish := func(prefix string) {
		t.Helper()
		for i := range n {
			if err := ncEU.Publish(fmt.Sprintf("%s%d", prefix, i), []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		if err := ncEU.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-early; err != nil {
		t.Fatal(err)
	}
	if got := eu.CatalogDeniedAtPeers(); got != 1 {
		t.Fatalf("eu's start had us confirm %d catalog residents on its link deny list, want 1 (cat.eu)", got)
	}
	publish("cat.eu.first:") // right after eu's start returned
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	natstest.WaitFor(t, 60*time.Second, func() error { return linkedTo(ctx, ncUS, "eu") })
	time.Sleep(time.Second) // us's interest crosses (where allowed)
	publish("cat.eu.linked:")
	publish("catopen.e:")
	time.Sleep(2 * time.Second)
	if got := len(resident); got != 0 {
		t.Errorf("catalog resident cat.eu of eu: the us subscriber received %d of %d events", got, 3*n)
	}
	if got := len(open); got != n {
		t.Errorf("catalog non-resident catopen of eu: the us subscriber received %d of %d; the link does not carry", got, n)
	}
	jsEU := natstest.JetStream(t, ncEU)
	s, err := jsEU.Stream(ctx, platform.StreamName("cat.eu"))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.CachedInfo().State.Msgs; got != 3*n {
		t.Errorf("cat.eu holds %d of %d events in eu", got, 3*n)
	}
}
