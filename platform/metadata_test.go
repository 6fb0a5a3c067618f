package platform

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// The stream metadata is the replicated record of a topic spec: what
// List and Describe read back must be what was applied, validation
// opt-in and event type included.
func TestTopicMetadataRoundTrip(t *testing.T) {
	in := TopicSpec{Name: "payments", Partitions: 6, Replicas: 3, Retention: Retention{MaxAge: 72 * 3600e9},
		Key: "order", Owner: "payments-team", Review: "required", ValidateEvents: true, EventType: "PaymentCaptured"}
	cfg := &jetstream.StreamConfig{Name: "payments", Replicas: 3, MaxAge: in.Retention.MaxAge, Metadata: topicMetadata(in)}
	out, err := TopicFromStream(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !out.ValidateEvents || out.EventType != "PaymentCaptured" || out.Review != "required" || out.Owner != "payments-team" || out.Partitions != 6 {
		t.Fatalf("read back %+v, applied %+v", out, in)
	}
	plain := TopicSpec{Name: "orders", Partitions: 2, Replicas: 3, Retention: Retention{MaxAge: 3600e9}}
	if md := topicMetadata(plain); md[mdValidate] != "" || md[mdEventType] != "" {
		t.Fatalf("a topic without validation carries validation metadata: %v", md)
	}
}
