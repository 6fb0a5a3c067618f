package consumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog/catalogtest"
	"github.com/msgplatform/platform/platform/dlq"
)

// A consumer process crashes between two attempts of a failing event;
// the member that takes over fails it to the end. The DLQ entry's first
// failure is the first attempt's, in the crashed process, not the first
// the new one saw.
func TestFirstFailureSurvivesConsumerCrash(t *testing.T) {
	t.Parallel()
	spec := platform.DefaultTopicSpec("refunds")
	spec.Replicas = 1
	f, js := catalogtest.TopicFabric(t, 1, spec, "notifier")
	ctx := natstest.Context(t, 60*time.Second)
	var mu sync.Mutex
	var firstAttempt time.Time
	second := make(chan struct{}, 1)
	conn1 := f.Conn()
	js1, _ := jetstream.New(conn1)
	m1 := startMember(t, js1, fastMember("notifier", "m1"), func(ctx context.Context, m *Message) error {
		mu.Lock()
		if firstAttempt.IsZero() {
			firstAttempt = time.Now()
		}
		mu.Unlock()
		if m.Attempt == 2 {
			select {
			case second <- struct{}{}:
			default:
			}
		}
		return errors.New("refund service unavailable")
	})
	publishEvent(t, ctx, js, platform.Event{ID: "r1", Topic: "refunds", Key: "refund:1", Payload: []byte("r1")})
	received(t, second, 20*time.Second, "never reached the second attempt")
	// The crash comes between two attempts, once the first failure is
	// recorded (it is written off the settling path, after the first
	// NAK, and on a loaded machine creating the bucket may take longer
	// than the first backoff).
	natstest.WaitFor(t, 10*time.Second, func() error {
		kv, err := js.KeyValue(ctx, dlq.FirstFailuresBucket)
		if err != nil {
			return err
		}
		keys, err := kv.ListKeys(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = keys.Stop() }()
		for range keys.Keys() {
			return nil
		}
		return errors.New("no first failure recorded yet")
	})
	time.Sleep(50 * time.Millisecond) // the second attempt is nak'd
	m1.crash()
	conn1.Close()
	crashedAt := time.Now()

	startMember(t, js, fastMember("notifier", "m2"), func(ctx context.Context, m *Message) error {
		return errors.New("refund service unavailable")
	})
	var e dlq.Entry
	natstest.WaitFor(t, 40*time.Second, func() error {
		es, err := dlq.Read(ctx, js, "refunds")
		if err != nil || len(es) != 1 {
			return fmt.Errorf("%d DLQ entries (%v)", len(es), err)
		}
		e = es[0]
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	if e.FirstFailure.After(crashedAt) || e.FirstFailure.Before(firstAttempt) || e.FirstFailure.Sub(firstAttempt) > time.Second {
		t.Errorf("first failure %s, want the crashed process's first attempt (%s), not after the crash (%s)",
			e.FirstFailure.Format(time.StampMilli), firstAttempt.Format(time.StampMilli), crashedAt.Format(time.StampMilli))
	}
	if !e.LastFailure.After(crashedAt) {
		t.Errorf("last failure %s, want after the crash %s", e.LastFailure, crashedAt)
	}
	// The record is gone once the event is dead-lettered (it is deleted
	// right after the DLQ entry is written, so wait for it a little).
	kv, err := js.KeyValue(ctx, dlq.FirstFailuresBucket)
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 5*time.Second, func() error {
		if _, err := kv.Get(ctx, "refunds."+e.Consumer+"."+strconv.FormatUint(e.StreamSeq, 10)); !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("first-failure record left after dead-lettering: %v", err)
		}
		return nil
	})
}
