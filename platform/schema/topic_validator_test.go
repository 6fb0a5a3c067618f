package schema_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/schema"
)

// Validation is opt-in per topic (validate: true): a bad payload to a
// validating topic is refused before it is sent, naming the field; the
// same payload to a topic that does not validate is stored, even when it
// names an event type; a validating topic refuses an event whose type is
// named nowhere.
func TestValidationIsOptInPerTopic(t *testing.T) {
	payments := platform.DefaultTopicSpec("payments")
	payments.Replicas, payments.ValidateEvents, payments.EventType = 1, true, "OrderPlaced"
	audit := platform.DefaultTopicSpec("audit")
	audit.Replicas, audit.ValidateEvents = 1, true
	orders := platform.DefaultTopicSpec("orders")
	orders.Replicas = 1
	if err := (platform.TopicSpec{Name: "x", Partitions: 1, Replicas: 1, Retention: platform.Retention{MaxAge: time.Hour}, EventType: "OrderPlaced"}).Validate(); err == nil || !strings.Contains(err.Error(), "event_type") {
		t.Fatalf("event_type without validate: %v, want a problem naming event_type", err)
	}
	js, reg, ctx := orderRegistry(t, payments, audit, orders)
	val := startValidator(t, ctx, reg.NewTopicValidator(payments, audit, orders))
	pub := platform.NewPublisher(js, platform.PublisherOptions{Validator: val})

	bad := []byte(`{"orderId":42,"total":10}`)
	_, err := pub.Publish(ctx, platform.Event{ID: "p1", Topic: "payments", Key: "k", Payload: bad})
	if !errors.Is(err, platform.ErrInvalidEvent) || !errors.Is(err, schema.ErrValidation) || !strings.Contains(err.Error(), "/orderId") {
		t.Fatalf("bad payload to a validating topic: %v; want a refusal naming /orderId", err)
	}
	_, err = pub.Publish(ctx, platform.Event{ID: "p2", Topic: "payments", Key: "k", Payload: []byte(`{"orderId":"o-1"}`)})
	if !errors.Is(err, schema.ErrValidation) || !strings.Contains(err.Error(), "total") {
		t.Fatalf("missing field: %v; want a refusal naming total", err)
	}
	ack, err := pub.Publish(ctx, platform.Event{ID: "p3", Topic: "payments", Key: "k", Payload: []byte(`{"orderId":"o-1","total":3}`)})
	if err != nil || ack.Sequence != 1 {
		t.Fatalf("good payload: %+v, %v; want stored as seq 1 (nothing refused was stored)", ack, err)
	}

	// The same bad payload, with or without an event type header, to a
	// topic that does not validate.
	for i, h := range []nats.Header{nil, {schema.EventTypeHeader: []string{"OrderPlaced"}}} {
		ack, err := pub.Publish(ctx, platform.Event{ID: "o" + string(rune('1'+i)), Topic: "orders", Key: "k", Headers: h, Payload: bad})
		if err != nil || ack.Sequence != uint64(i+1) {
			t.Fatalf("bad payload to a non-validating topic: %+v, %v; want stored", ack, err)
		}
	}

	// A validating topic with no event_type needs the header.
	_, err = pub.Publish(ctx, platform.Event{ID: "a1", Topic: "audit", Key: "k", Payload: bad})
	if !errors.Is(err, schema.ErrValidation) || !strings.Contains(err.Error(), "event_type") {
		t.Fatalf("untyped event on a validating topic: %v; want a refusal naming event_type", err)
	}
	_, err = pub.Publish(ctx, platform.Event{ID: "a2", Topic: "audit", Key: "k", Headers: nats.Header{schema.EventTypeHeader: []string{"OrderPlaced"}}, Payload: []byte(`{"orderId":"o-1","total":3}`)})
	if err != nil {
		t.Fatalf("typed good event on a validating topic: %v", err)
	}
}
