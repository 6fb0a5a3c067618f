package redrivetest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/dlq"
	"github.com/msgplatform/platform/redrive"
)

// DeadLetter publishes n events (ids evt-<topic>-<i>, keys order:<i>,
// tenant harbor-retail) to topic and writes a DLQ entry for each as group
// would (class permanent, reason fmt.Sprintf(reason, i)). It returns the
// DLQ sequences.
func DeadLetter(t testing.TB, js jetstream.JetStream, topic, group string, from, n int, reason string) []uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stream := platform.StreamName(topic)
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("redrivetest: topic %s: %v", topic, err)
	}
	var out []uint64
	for i := from; i < from+n; i++ {
		m := &nats.Msg{Subject: platform.TopicSubject(topic, "order:"+strconv.Itoa(i)), Header: nats.Header{}, Data: fmt.Appendf(nil, `{"order":%d}`, i)}
		m.Header.Set(platform.HeaderTenant, "harbor-retail")
		ack, err := js.PublishMsg(ctx, m, jetstream.WithMsgID(fmt.Sprintf("evt-%s-%d", topic, i)))
		if err != nil {
			t.Fatalf("redrivetest: publish: %v", err)
		}
		orig, err := s.GetMsg(ctx, ack.Sequence)
		if err != nil {
			t.Fatalf("redrivetest: read back: %v", err)
		}
		h := nats.Header{}
		for k, v := range orig.Header {
			if !strings.HasPrefix(k, "Nats-") {
				h[k] = v
			}
		}
		now := time.Now().UTC().Format(time.RFC3339Nano)
		consumer := group + "-p0"
		h.Set("Platform-Event-Id", orig.Header.Get(nats.MsgIdHdr))
		h.Set(dlq.HeaderReason, fmt.Sprintf(reason, i))
		h.Set(dlq.HeaderClass, string(dlq.ClassPermanent))
		h.Set(dlq.HeaderAttempts, "1")
		h.Set(dlq.HeaderStream, stream)
		h.Set(dlq.HeaderSeq, strconv.FormatUint(ack.Sequence, 10))
		h.Set(dlq.HeaderSubject, orig.Subject)
		h.Set(dlq.HeaderConsumer, consumer)
		h.Set(dlq.HeaderGroup, group)
		h.Set(dlq.HeaderTenant, "harbor-retail")
		h.Set(dlq.HeaderFirstFailure, now)
		h.Set(dlq.HeaderLastFailure, now)
		dack, err := js.PublishMsg(ctx, &nats.Msg{Subject: platform.DLQSubject(stream, consumer, ack.Sequence), Header: h, Data: orig.Data})
		if err != nil {
			t.Fatalf("redrivetest: dead-letter: %v", err)
		}
		out = append(out, dack.Sequence)
	}
	return out
}

// StartService starts a redrive service with the default config on js;
// it is closed when the test ends.
func StartService(t testing.TB, ctx context.Context, js jetstream.JetStream) *redrive.Service {
	t.Helper()
	s, err := redrive.New(js, redrive.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}
