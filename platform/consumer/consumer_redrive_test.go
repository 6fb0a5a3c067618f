package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog/catalogtest"
	"github.com/msgplatform/platform/platform/consumer"
	"github.com/msgplatform/platform/platform/dlq"
	"github.com/msgplatform/platform/redrive"
	"github.com/msgplatform/platform/redrive/redrivetest"
)

// Two groups consume one topic; one dead-letters an event. A redrive of
// that entry reaches only the group that failed: the other group's
// runtime acknowledges the redriven event without calling its handler,
// and counts the skip.
func TestRedriveReachesOnlyTheFailedGroup(t *testing.T) {
	t.Parallel()
	topic := catalogtest.Topic("payments", 1)
	topic.Replicas = 1
	_, js := catalogtest.TopicFabric(t, 1, topic, "ledger", "mailer")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var ledgerSeen, mailerSeen atomic.Int32
	var failing atomic.Bool
	failing.Store(true)
	metrics := consumer.NewMetrics()
	member := func(group string, h consumer.Handler) {
		m, err := consumer.NewMember(js, consumer.MemberConfig{Group: group, Heartbeat: 100 * time.Millisecond, TTL: 1200 * time.Millisecond,
			DrainTimeout: time.Second, Metrics: metrics}, h)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close(context.Background()) })
	}
	member("ledger", func(ctx context.Context, m *consumer.Message) error {
		ledgerSeen.Add(1)
		if failing.Load() {
			return consumer.Permanent(errors.New("ledger account 7 is closed"))
		}
		return nil
	})
	member("mailer", func(ctx context.Context, m *consumer.Message) error {
		mailerSeen.Add(1)
		return nil
	})

	pub := platform.NewPublisher(js, platform.PublisherOptions{})
	if _, err := pub.Publish(ctx, platform.Event{ID: "pay-1", Topic: "payments", Key: "order:1", Payload: []byte(`{"order":1}`)}); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 20*time.Second, func() error {
		es, err := dlq.Read(ctx, js, "payments")
		if err != nil || len(es) != 1 || mailerSeen.Load() != 1 {
			return fmt.Errorf("DLQ %d entries (%v), mailer saw %d", len(es), err, mailerSeen.Load())
		}
		return nil
	})
	failing.Store(false)

	svc := redrivetest.StartService(t, ctx, js)
	st, err := svc.Submit(ctx, redrive.Request{DLQ: "payments", Selection: redrive.Selection{All: true}, Reason: "account reopened", Requester: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Run(ctx, st.ID, "alice", "go"); err != nil {
		t.Fatal(err)
	}
	skipped := func() float64 {
		return testutil.ToFloat64(metricVec(t, metrics, "platform_consumer_redrive_skipped_total", "mailer"))
	}
	natstest.WaitFor(t, 30*time.Second, func() error {
		if s, err := svc.Get(ctx, st.ID); err != nil || s.State != redrive.StateCompleted {
			return fmt.Errorf("redrive %s: %v", s.State, err)
		}
		if ledgerSeen.Load() != 2 || skipped() != 1 {
			return fmt.Errorf("ledger saw %d (want 2), mailer skipped %v (want 1)", ledgerSeen.Load(), skipped())
		}
		return nil
	})
	time.Sleep(time.Second) // anything late would show now
	if n := mailerSeen.Load(); n != 1 {
		t.Errorf("mailer's handler saw the event %d times, want 1 (the redrive was for ledger)", n)
	}
	if n := ledgerSeen.Load(); n != 2 {
		t.Errorf("ledger's handler saw the event %d times, want 2", n)
	}
	if es, _ := dlq.Read(ctx, js, "payments"); len(es) != 0 {
		t.Errorf("DLQ still holds %d entries after the redrive succeeded", len(es))
	}
	for _, g := range []string{"ledger", "mailer"} {
		c, err := js.Consumer(ctx, "payments", platform.PartitionConsumer(g, 0))
		if err != nil {
			t.Fatal(err)
		}
		if info, err := c.Info(ctx); err != nil || info.NumPending+uint64(info.NumAckPending) != 0 {
			t.Errorf("group %s: pending %+v (%v), want everything acknowledged", g, infoPending(info), err)
		}
	}
}

func infoPending(i *jetstream.ConsumerInfo) string {
	if i == nil {
		return "?"
	}
	return fmt.Sprintf("%d undelivered, %d unacked", i.NumPending, i.NumAckPending)
}

// metricVec returns the one series of name in c whose first label is v,
// summed over the other labels, as a collector testutil can read.
func metricVec(t *testing.T, c prometheus.Collector, name, v string) prometheus.Collector {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) > 0 && m.GetLabel()[0].GetValue() == v {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "sum"})
	g.Set(sum)
	return g
}
