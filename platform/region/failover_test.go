package region

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
)

// TestFailoverFailback is the scenario on the in-process
// two-region fabric: write N in eu (a group acknowledges part of it),
// mirror to us, record positions, lose eu, fail over to us (the group
// resumes at its recorded position), write M in us, bring eu back, fail
// back: eu holds all N+M exactly once by event id, the group's position
// is translated back, us mirrors eu again. A resident topic is refused
// with the degrade mode.
func TestFailoverFailback(t *testing.T) {
	rr, rs := twoRegions(t, regionTopic("orders", ""), regionTopic("ledger.eu", "eu"))
	ctx := natstest.Context(t, 90*time.Second)
	eu, us := &rs[0], &rs[1]
	rec := catalog.NewReconciler(eu.JS, catalog.ReconcilerOptions{DefaultReplicas: 1})
	if _, err := rec.Apply(ctx, platform.Catalog{Topics: map[string]platform.TopicSpec{"orders": regionTopic("orders", "")}, Groups: map[string]platform.GroupSpec{"mailer": {Name: "mailer", Topic: "orders"}}}, catalog.ApplyOptions{AllowReducedReplicas: true}); err != nil {
		t.Fatalf("apply group: %v", err)
	}
	const N, M = 40, 25
	publish := func(js jetstream.JetStream, prefix string, n int) {
		t.Helper()
		for i := range n {
			m := nats.NewMsg(fmt.Sprintf("orders.k%d", i%7))
			m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%s-%d", prefix, i))
			m.Data = []byte(prefix)
			if _, err := js.PublishMsg(ctx, m); err != nil {
				t.Fatalf("publish %s-%d: %v", prefix, i, err)
			}
		}
	}
	ackSome := func(js jetstream.JetStream, n int) uint64 {
		t.Helper()
		c, err := js.Consumer(ctx, "orders", platform.PartitionConsumer("mailer", 0))
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.Fetch(n, jetstream.FetchMaxWait(time.Second), jetstream.FetchPriorityGroup("mailer"))
		if err != nil {
			t.Fatal(err)
		}
		for m := range b.Messages() {
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
		}
		ci, err := c.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ci.AckFloor.Stream
	}
	publish(eu.JS, "eu", N)
	euFloor := ackSome(eu.JS, 6)
	if euFloor == 0 {
		t.Fatal("the group acknowledged nothing in eu")
	}
	if _, err := rs.Mirror(ctx, MirrorRequest{Topic: "orders", To: "us"}); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 20*time.Second, func() error {
		st, err := rs.MirrorStatus(ctx, "orders", "us")
		if err == nil && st.LastSeq != N {
			err = errors.New("mirror behind")
		}
		return err
	})
	if n, err := rs.RecordPositions(ctx); err != nil || n != 2 {
		t.Fatalf("record positions: %d, %v", n, err)
	}

	// A planned failover, dry run: the origin answers, nothing is behind.
	dry, err := rs.Failover(ctx, FailoverRequest{Topic: "orders", To: "us", DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if !dry.OriginReachable || dry.LagEvents != 0 || dry.LastOriginSeq != N || len(dry.Groups) != 1 || dry.Groups[0].Partitions[0].Source != "origin" || dry.Groups[0].Partitions[0].StartSeq != euFloor+1 {
		t.Errorf("dry run %+v", dry)
	}
	// A resident topic cannot fail over; the refusal offers degrade mode.
	_, err = rs.Failover(ctx, FailoverRequest{Topic: "ledger.eu", To: "us"})
	if !errors.Is(err, ErrResidency) || !strings.Contains(err.Error(), "degrade mode") {
		t.Errorf("resident failover: want ErrResidency offering degrade mode, got %v", err)
	}

	rr.Kill("eu")
	fo, err := rs.Failover(ctx, FailoverRequest{Topic: "orders", To: "us"})
	if err != nil {
		t.Fatalf("failover: %v", err)
	}
	t.Logf("failover: %+v", fo)
	if fo.OriginReachable || fo.From != "eu" || fo.MirrorLastSeq != N || fo.PromotedAtSeq != N || fo.LastOriginSeq != N {
		t.Errorf("failover report %+v", fo)
	}
	if len(fo.Groups) != 1 || fo.Groups[0].Partitions[0].Source != "recorded" || fo.Groups[0].Partitions[0].StartSeq != euFloor+1 {
		t.Errorf("group positions %+v", fo.Groups)
	}
	if fo.DuplicateWindow == 0 || fo.DuplicateWindow > N {
		t.Errorf("duplicate window %d", fo.DuplicateWindow)
	}
	ci, err := us.JS.Consumer(ctx, "orders", platform.PartitionConsumer("mailer", 0))
	if err != nil {
		t.Fatal(err)
	}
	if ci.CachedInfo().AckFloor.Stream != euFloor {
		t.Errorf("us group ack floor %d, eu's was %d", ci.CachedInfo().AckFloor.Stream, euFloor)
	}
	publish(us.JS, "us", M)
	usFloor := ackSome(us.JS, 100) // the group drains partition 0 in us
	if usFloor <= N {
		t.Errorf("group did not reach the outage's events in us: floor %d", usFloor)
	}

	rr.Restart("eu")
	fb, err := rs.Failback(ctx, FailbackRequest{Topic: "orders"})
	if err != nil {
		t.Fatalf("failback: %v", err)
	}
	t.Logf("failback: %+v", fb)
	if fb.Copied != M || fb.Scanned != M || fb.OriginOnly != 0 {
		t.Errorf("failback report %+v", fb)
	}
	// eu holds every event exactly once by id.
	ids := map[string]int{}
	err = scanStream(ctx, eu.JS, "orders", 1, N+M, true, func(s scanned) error { ids[s.id]++; return nil })
	if err != nil {
		t.Fatal(err)
	}
	for i := range N {
		if ids[fmt.Sprintf("eu-%d", i)] != 1 {
			t.Errorf("eu-%d held %d times", i, ids[fmt.Sprintf("eu-%d", i)])
		}
	}
	for i := range M {
		if ids[fmt.Sprintf("us-%d", i)] != 1 {
			t.Errorf("us-%d held %d times in eu", i, ids[fmt.Sprintf("us-%d", i)])
		}
	}
	es, _ := eu.JS.Stream(ctx, "orders")
	if es.CachedInfo().State.Msgs != N+M {
		t.Errorf("eu holds %d events, want %d", es.CachedInfo().State.Msgs, N+M)
	}
	// The group resumes in eu after what it acknowledged in us.
	for _, g := range fb.Groups {
		if g.Partition == 0 && g.ToProcess != 0 {
			t.Errorf("group mailer partition 0 would reprocess %d events in eu after draining them in us", g.ToProcess)
		}
	}
	// us mirrors eu again.
	natstest.WaitFor(t, 20*time.Second, func() error {
		st, err := rs.MirrorStatus(ctx, "orders", "us")
		if err == nil && (st.LastSeq != N+M || st.From != "eu") {
			err = fmt.Errorf("mirror at %d from %s", st.LastSeq, st.From)
		}
		return err
	})
	publish(eu.JS, "after", 3)
	natstest.WaitFor(t, 20*time.Second, func() error {
		st, err := rs.MirrorStatus(ctx, "orders", "us")
		if err == nil && st.LastSeq != N+M+3 {
			err = fmt.Errorf("mirror at %d", st.LastSeq)
		}
		return err
	})
}
