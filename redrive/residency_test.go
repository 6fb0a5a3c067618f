package redrive

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/attack"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/platform/region"
)

// TestAttackReplayResidentGroupOntoCrossingSubject: a group of the
// resident orders.eu whose consumer pushes onto leak.push (a subject the
// region link carries; no residency guard runs here, which would delete
// that consumer), and a replay (group reset to the start) of it, direct
// and through a review request. Both are refused with
// region.ErrResidency naming leak.push; the reset never runs and the
// consumer's state is unchanged. A group of a non-resident topic with
// such a consumer is not this rule's concern.
func TestAttackReplayResidentGroupOntoCrossingSubject(t *testing.T) {
	eu := topic("orders.eu", "", "")
	eu.Residency = "eu"
	e := newEnv(t, eu, topic("orders", "", ""))
	ctx := natstest.Context(t, 30*time.Second)
	svc := e.service(nil)
	for _, stream := range []string{"orders_eu", "orders"} {
		if _, err := e.js.CreateOrUpdatePushConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "fraud-push", DeliverSubject: "leak.push." + stream,
			AckPolicy: jetstream.AckExplicitPolicy, Metadata: map[string]string{replayGroupMetadata: "fraud"}}); err != nil {
			t.Fatal(err)
		}
	}
	ran := 0
	reset := func(context.Context, catalog.GroupResetRequest) (catalog.GroupReset, error) {
		ran++
		return catalog.GroupReset{Partitions: []catalog.GroupResetPosition{{}}}, nil
	}
	req := catalog.GroupResetRequest{Group: "fraud", Topic: "orders.eu", ToStart: true}
	if _, err := svc.RunReset(ctx, req, "mallory@platform", "attack", reset); !errors.Is(err, region.ErrResidency) || !strings.Contains(err.Error(), "leak.push.orders_eu") {
		t.Fatalf("direct replay: want a residency refusal naming leak.push.orders_eu, got %v", err)
	}
	req.Topic = "" // found from the group's consumers
	if _, err := svc.RequestResetAs(ctx, req, "mallory@platform", "attack", true); !errors.Is(err, region.ErrResidency) {
		t.Fatalf("replay request: want a residency refusal, got %v", err)
	}
	if ran != 0 {
		t.Fatalf("the reset ran %d times", ran)
	}
	c, err := e.js.PushConsumer(ctx, "orders_eu", "fraud-push")
	if err != nil {
		t.Fatal(err)
	}
	if ci := c.CachedInfo(); ci.Delivered.Consumer != 0 || ci.AckFloor.Consumer != 0 {
		t.Fatalf("consumer state changed: delivered %d, ack floor %d", ci.Delivered.Consumer, ci.AckFloor.Consumer)
	}
	if _, err := svc.RunReset(ctx, catalog.GroupResetRequest{Group: "fraud", Topic: "orders", ToStart: true}, "ops@platform", "legit", reset); err != nil || ran != 1 {
		t.Fatalf("replay of the non-resident orders' group: %v (ran %d)", err, ran)
	}
	attack.Refused(t, "replay-resident-group-onto-crossing-subject")
}
