package region

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/platform"
)

// TestResidencyReportFindsPropagatedCopies: with no gate or guard running
// (a violation made while none ran), a same-region copy of the resident
// orders.eu, a copy of that copy mirrored into us, a resident KV bucket
// mirrored into us and a republish of the copy: CheckStream refuses the
// mirrors naming orders.eu, and the report lists every copy and flags the
// mirrors abroad and the republish; ResidentLinkDeny puts the copies and
// the bucket on the link deny list.
func TestResidencyReportFindsPropagatedCopies(t *testing.T) {
	_, rs := twoRegions(t, regionTopic("orders.eu", "eu"), regionTopic("orders", ""))
	ctx := natstest.Context(t, 60*time.Second)
	eu, us := rs[0].JS, rs[1].JS
	mustCreate := func(js jetstream.JetStream, cfg jetstream.StreamConfig) {
		t.Helper()
		cfg.Replicas = 1
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			t.Fatalf("create %s: %v", cfg.Name, err)
		}
	}
	mustCreate(eu, jetstream.StreamConfig{Name: "copy", Sources: []*jetstream.StreamSource{{Name: platform.StreamName("orders.eu")}}})
	mustCreate(eu, jetstream.StreamConfig{Name: "copy2", Mirror: &jetstream.StreamSource{Name: "copy"}, RePublish: &jetstream.RePublish{Source: ">", Destination: "leak.>"}})
	mirror := jetstream.StreamConfig{Name: "stolen", Mirror: &jetstream.StreamSource{Name: "copy2", Domain: "eu"}}
	err := rs.CheckStream(ctx, "us", mirror)
	if err == nil || !strings.Contains(err.Error(), "topic orders.eu (through stream copy2) is resident in eu") {
		t.Fatalf("CheckStream of a mirror of the copy in us: %v", err)
	}
	mustCreate(us, mirror)
	if _, err := eu.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "sessions", Replicas: 1, Metadata: map[string]string{platform.MetaResidency: "eu"}}); err != nil {
		t.Fatal(err)
	}
	if err := rs.CheckStream(ctx, "us", jetstream.StreamConfig{Name: "KV_s2", Mirror: &jetstream.StreamSource{Name: "KV_sessions", Domain: "eu"}}); err == nil || !strings.Contains(err.Error(), "kv bucket sessions is resident in eu") {
		t.Fatalf("CheckStream of a KV mirror in us: %v", err)
	}
	mustCreate(us, jetstream.StreamConfig{Name: "KV_s2", Mirror: &jetstream.StreamSource{Name: "KV_sessions", Domain: "eu"}})

	rep, err := rs.Report(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var copies []string
	kv := false
	for _, tr := range rep.Topics {
		if tr.Topic == "orders.eu" {
			for _, c := range tr.Copies {
				copies = append(copies, c.Region+":"+c.Stream+"<"+c.How+":"+c.Of)
			}
		}
		if tr.Kind == "kv" && tr.Topic == "sessions" && tr.Residency == "eu" && len(tr.Copies) == 1 && tr.Copies[0].Region == "us" {
			kv = true
		}
	}
	want := []string{"eu:copy<source:orders_eu", "eu:copy2<mirror:copy", "us:stolen<mirror:copy2", "eu:leak.><republish:copy2"}
	for _, w := range want {
		if !strings.Contains(strings.Join(copies, " "), w) {
			t.Errorf("report: orders.eu copies %v lack %s", copies, w)
		}
	}
	if !kv {
		t.Errorf("report lacks kv sessions with its copy in us: %+v", rep.Topics)
	}
	viol := strings.Join(rep.Violations, "\n")
	for _, w := range []string{"stream stolen in us is a mirror of copy2", "republishes it to leak.>", "kv sessions is resident in eu but stream KV_s2 in us is a mirror of KV_sessions"} {
		if !strings.Contains(viol, w) {
			t.Errorf("report violations lack %q:\n%s", w, viol)
		}
	}
	deny, names, err := ResidentLinkDeny(ctx, eu)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"orders.eu", ResidentStreamEntry + "copy", ResidentStreamEntry + "copy2", ResidentStreamEntry + "KV_sessions", ResidentSubjectEntry + "$KV.sessions.>", ResidentSubjectEntry + "leak.>"} {
		if !strings.Contains(" "+strings.Join(names, " ")+" ", " "+w+" ") {
			t.Errorf("ResidentLinkDeny entries %v lack %s", names, w)
		}
	}
	for _, w := range []string{"$JS.*.API.CONSUMER.MSG.NEXT.copy2.>", "$JS.*.API.STREAM.SNAPSHOT.KV_sessions", "$JS.*.API.DIRECT.GET.copy"} {
		if !strings.Contains(" "+strings.Join(deny, " ")+" ", " "+w+" ") {
			t.Errorf("ResidentLinkDeny lacks %s", w)
		}
	}
	t.Logf("report: %d violations:\n%s", len(rep.Violations), viol)
}

// TestResidencyGuardRemovesRepublish: with the guard alone (no gate: a
// republish added while the gate's mappings were missing), a republish of
// the resident orders.eu onto leak.> is removed within moments and
// audited ("republish removed"); one under orders.eu.> is kept.
func TestResidencyGuardRemovesRepublish(t *testing.T) {
	_, rs := twoRegions(t, regionTopic("orders.eu", "eu"))
	ctx := natstest.Context(t, 60*time.Second)
	_, refused := guardRefusals(t, ctx, rs)
	eu := rs[0].JS
	s, err := eu.Stream(ctx, platform.StreamName("orders.eu"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.RePublish = &jetstream.RePublish{Source: ">", Destination: "leak.>"}
	if _, err := eu.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if r := nextRefusal(t, refused, "the guard did not refuse the republish"); r.Remedy != "republish removed" || !strings.Contains(strings.Join(r.Problems, ";"), "republishing it to leak.>") {
		t.Fatalf("refusal %+v", r)
	}
	s, err = eu.Stream(ctx, cfg.Name)
	if err != nil || s.CachedInfo().Config.RePublish != nil {
		t.Fatalf("republish kept: %v %+v", err, s.CachedInfo().Config.RePublish)
	}
	cfg.RePublish = &jetstream.RePublish{Source: "orders.eu.>", Destination: "orders.eu.copies.{{wildcard(1)}}.>"}
	if err := rs.CheckStream(ctx, "eu", cfg); err != nil {
		t.Fatalf("republish under the topic's own subjects refused: %v", err)
	}
}

// TestResidencyGuardDeletesCrossingPushConsumer: a push consumer of the
// resident orders.eu delivering on leak.push (a subject the link
// carries) is deleted and audited ("consumer deleted"); a pull consumer
// and a push consumer of the non-resident orders are left alone.
func TestResidencyGuardDeletesCrossingPushConsumer(t *testing.T) {
	_, rs := twoRegions(t, regionTopic("orders.eu", "eu"), regionTopic("orders", ""))
	ctx := natstest.Context(t, 60*time.Second)
	g, refused := guardRefusals(t, ctx, rs)
	eu := rs[0].JS
	if _, err := eu.CreateOrUpdatePushConsumer(ctx, platform.StreamName("orders.eu"), jetstream.ConsumerConfig{Durable: "leaky", DeliverSubject: "leak.push", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	if _, err := eu.CreateOrUpdateConsumer(ctx, platform.StreamName("orders.eu"), jetstream.ConsumerConfig{Durable: "pull", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	if _, err := eu.CreateOrUpdatePushConsumer(ctx, platform.StreamName("orders"), jetstream.ConsumerConfig{Durable: "fine", DeliverSubject: "plain.push", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	if r := nextRefusal(t, refused, "the guard did not refuse the push consumer"); r.Remedy != "consumer deleted" || r.Stream != platform.StreamName("orders.eu") || !strings.Contains(strings.Join(r.Problems, ";"), "push consumer leaky of stream orders_eu delivers on leak.push") {
		t.Fatalf("refusal %+v", r)
	}
	if _, err := eu.PushConsumer(ctx, platform.StreamName("orders.eu"), "leaky"); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatalf("push consumer kept: %v", err)
	}
	time.Sleep(500 * time.Millisecond)
	if _, err := eu.Consumer(ctx, platform.StreamName("orders.eu"), "pull"); err != nil {
		t.Errorf("pull consumer of orders.eu: %v", err)
	}
	if _, err := eu.PushConsumer(ctx, platform.StreamName("orders"), "fine"); err != nil {
		t.Errorf("push consumer of orders: %v", err)
	}
	if g.Refused() != 1 {
		t.Errorf("guard refused %d, want 1", g.Refused())
	}
}

// guardRefusals starts a guard over rs, stopped when the test ends, and
// returns it and the refusals it reports.
func guardRefusals(t *testing.T, ctx context.Context, rs Regions) (*Guard, <-chan Refusal) {
	t.Helper()
	refused := make(chan Refusal, 4)
	g, err := StartGuard(ctx, rs, GuardOptions{OnRefusal: func(r Refusal) { refused <- r }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Stop)
	return g, refused
}

// nextRefusal returns the next refusal on refused, failing the test with
// msg if none comes within 15 s.
func nextRefusal(t *testing.T, refused <-chan Refusal, msg string) Refusal {
	t.Helper()
	select {
	case r := <-refused:
		return r
	case <-time.After(15 * time.Second):
	}
	t.Fatal(msg)
	return Refusal{}
}
