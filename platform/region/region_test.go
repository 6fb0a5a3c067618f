package region

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
)

// twoRegions starts eu and us (one node each) linked by a leafnode whose
// deny list is the residency policy of the given topics, creates the
// topics in eu and returns the platform's view of both regions.
func twoRegions(t *testing.T, topics ...platform.TopicSpec) (*natstest.Regions, Regions) {
	t.Helper()
	rr := natstest.RunRegions(t, 1, LinkDeny(topics), "eu", "us")
	rs := Regions{
		{Name: "eu", Domain: "eu", JS: rr.JetStream("eu")},
		{Name: "us", Domain: "us", JS: rr.JetStream("us")},
	}
	rec := catalog.NewReconciler(rs[0].JS, catalog.ReconcilerOptions{DefaultReplicas: 1})
	for _, tp := range topics {
		if _, err := rec.ApplyTopic(natstest.Context(t, 30*time.Second), tp, catalog.ApplyOptions{AllowReducedReplicas: true}); err != nil {
			t.Fatalf("apply %s: %v", tp.Name, err)
		}
	}
	return rr, rs
}

func regionTopic(name, residency string) platform.TopicSpec {
	t := platform.DefaultTopicSpec(name)
	t.Partitions, t.Replicas, t.Residency = 2, 1, residency
	return t
}

// listen subscribes nc to subjects until the test ends and counts what
// arrives: a message on a subject starting with resident or "$DLQ." as
// leaked, any other as crossed. It flushes the subscriptions before it
// returns.
func listen(t *testing.T, nc *nats.Conn, resident string, subjects ...string) (leaked, crossed *atomic.Int64) {
	t.Helper()
	leaked, crossed = new(atomic.Int64), new(atomic.Int64)
	for _, subj := range subjects {
		sub, err := nc.Subscribe(subj, func(m *nats.Msg) {
			if strings.HasPrefix(m.Subject, resident) || strings.HasPrefix(m.Subject, "$DLQ.") {
				leaked.Add(1)
			} else {
				crossed.Add(1)
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	_ = nc.Flush()
	return leaked, crossed
}

// publishMix publishes, 20 times over, a resident event on resident(i)
// through js (stored, so acknowledged), a dead letter on dlq and a
// non-resident event on plain through nc, then flushes nc.
func publishMix(ctx context.Context, t *testing.T, js jetstream.JetStream, nc *nats.Conn, resident func(i int) string, dlq, plain string) {
	t.Helper()
	for i := range 20 {
		if _, err := js.Publish(ctx, resident(i), []byte("resident")); err != nil {
			t.Fatal(err)
		}
		if err := nc.Publish(dlq, []byte("resident dead letter")); err != nil {
			t.Fatal(err)
		}
		if err := nc.Publish(plain, []byte("not resident")); err != nil {
			t.Fatal(err)
		}
	}
	_ = nc.Flush()
}

// linkLeaked reports whether leaked counted any of resident's messages
// in the other region (failing the test if so), and fails the test if
// crossed counted none: the link carried no non-resident message at all.
func linkLeaked(t *testing.T, leaked, crossed *atomic.Int64, resident string) bool {
	t.Helper()
	if crossed.Load() == 0 {
		t.Errorf("the link carries nothing: the non-resident control messages did not reach us")
	}
	if n := leaked.Load(); n != 0 {
		t.Errorf("core subscribers in us received %d of %s's resident messages", n, resident)
		return true
	}
	return false
}

// TestResidencyEveryRouteRefused tries every route a resident event could
// take from eu to us and counts the attempts: none may succeed, and each
// platform refusal names the topic and its region.
func TestResidencyEveryRouteRefused(t *testing.T) {
	rr, rs := twoRegions(t, regionTopic("orders.eu", "eu"), regionTopic("orders", ""))
	ctx := natstest.Context(t, 60*time.Second)
	euNC, usNC := rr.Conn("eu"), rr.Conn("us")

	// Core subscribers in us on everything the topic or its DLQ could use.
	leaked, crossed := listen(t, usNC, "orders.eu.", "orders.eu.>", "$DLQ.orders_eu.>", "orders.*")
	time.Sleep(300 * time.Millisecond) // interest propagates over the link
	euJS := rs[0].JS
	publishMix(ctx, t, euJS, euNC, func(i int) string { return "orders.eu.k" + string(rune('a'+i)) }, "$DLQ.orders_eu.g.1", "orders.k")

	attempts, succeeded := 0, 0
	refused := func(route string, err error) {
		t.Helper()
		attempts++
		if err == nil {
			succeeded++
			t.Errorf("%s: not refused", route)
			return
		}
		t.Logf("%s: refused: %v", route, err)
	}
	// 1-3. Through the platform: mirror, mirror of the DLQ, source.
	_, err := rs.Mirror(ctx, MirrorRequest{Topic: "orders.eu", To: "us"})
	if !errors.Is(err, ErrResidency) || !strings.Contains(err.Error(), "resident in eu") {
		t.Errorf("mirror: want ErrResidency naming eu, got %v", err)
	}
	refused("platform mirror", err)
	for _, src := range []string{platform.DLQStream("orders.eu"), platform.DLQEventsStream("orders.eu")} {
		err = rs.CheckStream(ctx, "us", jetstream.StreamConfig{Name: "x", Mirror: &jetstream.StreamSource{Name: src, Domain: "eu"}})
		if !errors.Is(err, ErrResidency) {
			t.Errorf("mirror of %s: want ErrResidency, got %v", src, err)
		}
		refused("platform mirror of "+src, err)
	}
	err = rs.CheckStream(ctx, "us", jetstream.StreamConfig{Name: "x", Subjects: []string{"x.>"}, Sources: []*jetstream.StreamSource{{Name: "orders_eu", Domain: "eu"}}})
	if !errors.Is(err, ErrResidency) {
		t.Errorf("source: want ErrResidency, got %v", err)
	}
	refused("platform source", err)

	// 4. Directly through the JetStream API in us, as the nats CLI would
	// (nats stream add --mirror orders_eu --mirror-domain eu): the stream
	// is created (us's own API cannot know eu's policy), but the link
	// refuses the consumer it needs, so it never receives an event; the
	// residency report flags it.
	usJS := rs[1].JS
	hand, err := usJS.CreateStream(ctx, jetstream.StreamConfig{Name: "stolen", Mirror: &jetstream.StreamSource{Name: "orders_eu", Domain: "eu"}})
	if err != nil {
		t.Fatalf("hand-made mirror: %v", err)
	}
	// 5. A direct get of eu's stream from us (nats stream get --js-domain eu).
	euFromUS, err := jetstream.NewWithDomain(usNC, "eu")
	if err != nil {
		t.Fatal(err)
	}
	gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = getOverLink(gctx, usNC, "eu", "orders_eu")
	cancel()
	refused("direct get from us", err)
	// 6. A consumer on eu's stream from us (nats consumer add --js-domain eu).
	gctx, cancel = context.WithTimeout(ctx, 2*time.Second)
	_, err = euFromUS.CreateOrUpdateConsumer(gctx, "orders_eu", jetstream.ConsumerConfig{Durable: "peek"})
	cancel()
	refused("consumer from us", err)

	time.Sleep(2 * time.Second)
	hi, err := hand.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	attempts++
	if hi.State.Msgs != 0 {
		succeeded++
		t.Errorf("hand-made mirror in us holds %d resident events", hi.State.Msgs)
	}
	t.Logf("hand-made mirror: created, %d msgs, mirror error %v", hi.State.Msgs, hi.Mirror.Error)

	attempts++
	if linkLeaked(t, leaked, crossed, "orders.eu") {
		succeeded++
	}
	t.Logf("%d routes tried, %d succeeded", attempts, succeeded)

	rep, err := rs.Report(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, v := range rep.Violations {
		if strings.Contains(v, "stolen") && strings.Contains(v, "orders.eu") {
			found = true
		}
	}
	if !found {
		t.Errorf("report does not flag the hand-made mirror: %+v", rep)
	}
}

// TestMirrorNonResident mirrors a non-resident topic from eu to us and
// reads its lag down to zero; the mirror keeps the origin's sequences.
// TestCheckStreamDeliveriesOnTheLink: JetStream delivers a source on
// $JS.S.<id>, which no region link carries (SourceLinkDeny), and a mirror
// on $JS.M.<id>, which the links carry for mirrors across regions. So a
// source across regions is refused (it would never receive), as is a
// mirror of resident data in its own region (its deliveries would cross);
// a source in the region and a mirror across regions of open data pass.
func TestCheckStreamDeliveriesOnTheLink(t *testing.T) {
	_, rs := twoRegions(t, regionTopic("orders", ""), regionTopic("orders.eu", "eu"))
	ctx := natstest.Context(t, 30*time.Second)
	open, resident := platform.StreamName("orders"), platform.StreamName("orders.eu")
	for _, c := range []struct {
		what, in string
		cfg      jetstream.StreamConfig
		want     string // "" passes
	}{
		{"source across regions", "us", jetstream.StreamConfig{Name: "x", Subjects: []string{"x.>"}, Sources: []*jetstream.StreamSource{{Name: open, Domain: "eu"}}}, "sources are not carried across region links ($JS.S.> is denied on them)"},
		{"mirror across regions", "us", jetstream.StreamConfig{Name: "x", Mirror: &jetstream.StreamSource{Name: open, Domain: "eu"}}, ""},
		{"mirror of resident data in its region", "eu", jetstream.StreamConfig{Name: "x", Mirror: &jetstream.StreamSource{Name: resident}}, "topic orders.eu is resident in eu: a mirror of stream " + resident + " in the same region receives on $JS.M.<id>"},
		{"source of resident data in its region", "eu", jetstream.StreamConfig{Name: "x", Subjects: []string{"x.>"}, Sources: []*jetstream.StreamSource{{Name: resident}}}, ""},
		{"mirror of open data in its region", "eu", jetstream.StreamConfig{Name: "x", Mirror: &jetstream.StreamSource{Name: open}}, ""},
	} {
		err := rs.CheckStream(ctx, c.in, c.cfg)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.what, err)
		case c.want != "" && (!errors.Is(err, ErrResidency) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: want ErrResidency naming %q, got %v", c.what, c.want, err)
		}
	}
}

func TestMirrorNonResident(t *testing.T) {
	_, rs := twoRegions(t, regionTopic("orders", ""))
	ctx := natstest.Context(t, 60*time.Second)
	for i := range 50 {
		if _, err := rs[0].JS.Publish(ctx, "orders.k"+string(rune('a'+i%26)), []byte("e")); err != nil {
			t.Fatal(err)
		}
	}
	st, err := rs.Mirror(ctx, MirrorRequest{Topic: "orders", To: "us"})
	if err != nil {
		t.Fatal(err)
	}
	if !st.Created || st.From != "eu" {
		t.Errorf("status %+v", st)
	}
	natstest.WaitFor(t, 20*time.Second, func() error {
		st, err = rs.MirrorStatus(ctx, "orders", "us")
		if err != nil {
			return err
		}
		if st.LagMessages != 0 || st.LastSeq != 50 {
			return errors.New("lag " + st.Stream)
		}
		return nil
	})
	if st.LagSeconds != 0 || st.OriginLastSeq != 50 {
		t.Errorf("caught-up status %+v", st)
	}
	if _, err := rs.Mirror(ctx, MirrorRequest{Topic: "orders", To: "us"}); err != nil {
		t.Errorf("mirror again (idempotent): %v", err)
	}
	rep, err := rs.Report(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Topics) != 1 || len(rep.Topics[0].Copies) != 1 || rep.Topics[0].Copies[0].Region != "us" || len(rep.Violations) != 0 {
		t.Errorf("report %+v", rep)
	}
}

// getOverLink sends a direct get for stream's first event to domain's API
// from nc, as `nats stream get --js-domain` does.
func getOverLink(ctx context.Context, nc *nats.Conn, domain, stream string) (*nats.Msg, error) {
	m, err := nc.RequestWithContext(ctx, "$JS."+domain+".API.DIRECT.GET."+stream, []byte(`{"seq":1}`))
	if err != nil {
		return nil, err
	}
	if m.Header.Get("Status") != "" {
		return nil, errors.New("status " + m.Header.Get("Status") + " " + m.Header.Get("Description"))
	}
	return m, nil
}

// TestResidencyQueue: a queue resident in eu (jobs.eu) gets a topic's
// treatment. A hand-made mirror or source of its stream or DLQ stream in
// us, through nats.go, is refused at the request by the gate (and by
// CheckStream) naming the queue and eu; core subscribers in us on its
// subjects and dead letters receive 0 while the non-resident queue's
// messages cross; failover is refused; the residency report lists it as
// a queue resident in eu; a residency that is not a region name is
// refused by validation.
func TestResidencyQueue(t *testing.T) {
	jobsEU, tasks := platform.DefaultQueueSpec("jobs.eu"), platform.DefaultQueueSpec("tasks")
	jobsEU.Replicas, jobsEU.Residency, tasks.Replicas = 1, "eu", 1
	bad := jobsEU
	bad.Residency = "EU west"
	if err := bad.Validate(); !errors.Is(err, platform.ErrInvalidSpec) || !strings.Contains(err.Error(), `residency: must be a region name such as eu, got "EU west"`) {
		t.Errorf("queue residency %q: want a validation error naming residency, got %v", bad.Residency, err)
	}
	rr := natstest.RunRegions(t, 1, QueueLinkDeny([]platform.QueueSpec{jobsEU, tasks}), "eu", "us")
	rs := Regions{
		{Name: "eu", Domain: "eu", JS: rr.JetStream("eu")},
		{Name: "us", Domain: "us", JS: rr.JetStream("us")},
	}
	ctx := natstest.Context(t, 90*time.Second)
	rec := catalog.NewReconciler(rs[0].JS, catalog.ReconcilerOptions{DefaultReplicas: 1})
	for _, q := range []platform.QueueSpec{jobsEU, tasks} {
		if _, err := rec.ApplyQueue(ctx, q, catalog.ApplyOptions{}); err != nil {
			t.Fatalf("apply queue %s: %v", q.Name, err)
		}
	}
	_, refusals := startGatedGuard(t, rr, rs)
	euNC, usNC := rr.Conn("eu"), rr.Conn("us")

	leaked, crossed := listen(t, usNC, "jobs.eu.", "jobs.eu.>", "$DLQ.jobs_eu.>", "tasks.*")
	time.Sleep(500 * time.Millisecond) // interest propagates over the link
	publishMix(ctx, t, rs[0].JS, euNC, func(i int) string { return fmt.Sprintf("jobs.eu.j%d", i) }, "$DLQ.jobs_eu.workers.1", "tasks.k")

	attempts, succeeded := 0, 0
	usJS := rs[1].JS
	for _, rogue := range []jetstream.StreamConfig{
		{Name: "rogue_jobs", Mirror: &jetstream.StreamSource{Name: "jobs_eu", Domain: "eu"}},
		{Name: "rogue_jobs_dlq", Mirror: &jetstream.StreamSource{Name: platform.DLQStream("jobs.eu"), Domain: "eu"}},
		{Name: "rogue_jobs_src", Subjects: []string{"rogue.>"}, Sources: []*jetstream.StreamSource{{Name: "jobs_eu", Domain: "eu"}}},
	} {
		attempts++
		if err := rs.CheckStream(ctx, "us", rogue); !errors.Is(err, ErrResidency) || !strings.Contains(err.Error(), "queue jobs.eu is resident in eu") {
			t.Errorf("CheckStream %s: want ErrResidency naming queue jobs.eu, got %v", rogue.Name, err)
		}
		_, err := usJS.CreateStream(ctx, rogue)
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) || apiErr.ErrorCode != GateErrCode || !strings.Contains(apiErr.Description, "queue jobs.eu is resident in eu") {
			succeeded++
			t.Errorf("nats.go create %s in us: want the gate's APIError naming queue jobs.eu, got %T %v", rogue.Name, err, err)
			continue
		}
		if _, err := usJS.Stream(ctx, rogue.Name); !errors.Is(err, jetstream.ErrStreamNotFound) {
			succeeded++
			t.Errorf("refused %s exists in us: %v", rogue.Name, err)
		}
	}
	attempts++
	if _, err := rs.Failover(ctx, FailoverRequest{Topic: "jobs.eu", To: "us"}); !errors.Is(err, ErrResidency) || !strings.Contains(err.Error(), "resident in eu") {
		succeeded++
		t.Errorf("failover of jobs.eu: want ErrResidency, got %v", err)
	}
	// A mirror of the non-resident queue still passes the gate.
	if _, err := usJS.CreateStream(ctx, jetstream.StreamConfig{Name: "tasks_copy", Mirror: &jetstream.StreamSource{Name: "tasks", Domain: "eu"}}); err != nil {
		t.Errorf("mirror of the non-resident queue: %v", err)
	}

	time.Sleep(time.Second)
	attempts++
	if linkLeaked(t, leaked, crossed, "jobs.eu") {
		succeeded++
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if n := len(refusals()); n != 3 {
			return fmt.Errorf("%d refusals recorded, want 3", n)
		}
		return nil
	})
	t.Logf("%d cross-border routes of the resident queue tried, %d succeeded", attempts, succeeded)

	rep, err := rs.Report(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got *TopicResidency
	for i := range rep.Topics {
		if rep.Topics[i].Topic == "jobs.eu" {
			got = &rep.Topics[i]
		}
	}
	if got == nil || got.Kind != "queue" || got.Residency != "eu" || got.Region != "eu" || len(got.Copies) != 0 || len(rep.Violations) != 0 {
		t.Errorf("report: want jobs.eu as a queue resident in eu, no copies, no violations; got %+v", rep)
	}
}
