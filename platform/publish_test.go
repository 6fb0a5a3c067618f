package platform_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog/catalogtest"
)

func TestPublisherDedupesAndFailsClearlyWithoutQuorum(t *testing.T) {
	f, js := catalogtest.TopicFabric(t, 3, catalogtest.Topic("orders", 4))
	reg := prometheus.NewRegistry()
	pub := platform.NewPublisher(js, platform.PublisherOptions{AckTimeout: 2 * time.Second, Registerer: reg})
	ctx := natstest.Context(t, 2*time.Minute)

	// Bad events are refused before anything is sent.
	for _, ev := range []platform.Event{
		{Topic: "orders", Key: "order:1"},
		{ID: "e1", Topic: "orders", Key: "order.1"},
		{ID: "e1", Topic: "Orders!", Key: "order:1"},
	} {
		if _, err := pub.Publish(ctx, ev); !errors.Is(err, platform.ErrInvalidEvent) {
			t.Errorf("Publish(%+v): err = %v, want ErrInvalidEvent", ev, err)
		}
	}

	for i := range 50 {
		if _, err := pub.Publish(ctx, platform.Event{ID: fmt.Sprintf("evt-%d", i), Topic: "orders", Key: fmt.Sprintf("order:%d", i%7), Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	// A retried publish with the same id is stored once.
	ack, err := pub.Publish(ctx, platform.Event{ID: "evt-3", Topic: "orders", Key: "order:3", Payload: []byte("x")})
	if err != nil || !ack.Duplicate {
		t.Fatalf("republish evt-3: ack %+v err %v, want a duplicate ack", ack, err)
	}

	f.WaitReplicasCurrent(js, "orders")
	f.Kill(1)
	f.Kill(2)
	for i := range 3 {
		start := time.Now()
		_, err := pub.Publish(ctx, platform.Event{ID: fmt.Sprintf("late-%d", i), Topic: "orders", Key: "order:1", Payload: []byte("x")})
		took := time.Since(start)
		if !errors.Is(err, platform.ErrPublishRefused) && !errors.Is(err, platform.ErrPublishUnknown) {
			t.Fatalf("publish without quorum: err = %v, want refused or unknown", err)
		}
		if !strings.Contains(err.Error(), "quorum") || !strings.Contains(err.Error(), "same event id") {
			t.Fatalf("publish without quorum: error does not say what happened and what to do: %v", err)
		}
		if took > 3*time.Second {
			t.Fatalf("publish without quorum took %s", took)
		}
		t.Logf("publish without quorum failed in %s: %v", took.Round(time.Millisecond), err)
	}
	st := pub.Stats()
	if st.OK != 50 || st.Duplicate != 1 || st.Refused+st.Unknown != 3 {
		t.Fatalf("stats = %+v, want 50 ok, 1 duplicate, 3 refused or unknown", st)
	}
	// The same counts as a Prometheus metric by topic and outcome.
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "platform_publish_outcomes_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" {
					got[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	if got["ok"] != 50 || got["duplicate"] != 1 || got["refused"]+got["unknown"] != 3 {
		t.Fatalf("platform_publish_outcomes_total = %v", got)
	}
}
