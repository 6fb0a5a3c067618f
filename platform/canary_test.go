package platform

import "testing"

func TestCanaryOptOutIsRecordedOnTheStream(t *testing.T) {
	off := false
	topic := DefaultTopicSpec("orders")
	if md := TopicStreamConfig(topic).Metadata; md[mdCanary] != "" {
		t.Fatalf("default topic records %s=%q: existing streams would show a change", mdCanary, md[mdCanary])
	}
	topic.Canary = &off
	cfg := TopicStreamConfig(topic)
	back, err := TopicFromStream(&cfg)
	if err != nil || back.CanaryEnabled() {
		t.Fatalf("topic opt-out read back: %+v, %v", back, err)
	}
	q := DefaultQueueSpec("jobs")
	q.Canary = &off
	qcfg := QueueStreamConfig(q)
	qback, err := QueueFromStream(&qcfg)
	if err != nil || qback.CanaryEnabled() {
		t.Fatalf("queue opt-out read back: %+v, %v", qback, err)
	}
	if !DefaultQueueSpec("jobs").CanaryEnabled() || !DefaultTopicSpec("orders").CanaryEnabled() {
		t.Fatal("canary must be on by default")
	}
}
