package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/daemon/daemontest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/platform/dlq"
)

// platformd routes dead letters for every topic and queue, declared or
// applied later: an event a group or a worker terminated without copying
// it (no Member or Workers router running) still reaches its DLQ, with
// its payload, headers, origin, group and tenant.
func TestDaemonRoutesDeadLettersOfEveryObject(t *testing.T) {
	d, _, js, ctx := daemontest.StartAdmin(t, 1, 90*time.Second)

	// A queue applied after the daemon started (as through the control API).
	late := platform.DefaultQueueSpec("refund-jobs")
	late.Replicas, late.Lease, late.MaxAttempts = 1, time.Second, 1
	if _, err := catalog.NewReconciler(js, catalog.ReconcilerOptions{}).ApplyQueue(ctx, late, catalog.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 20*time.Second, func() error {
		want := []string{"orders", "refund-jobs", "shipment-jobs"}
		if got := d.DLQRouters().Objects(); fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("routed objects %v, want %v", got, want)
		}
		return nil
	})

	key := "order:42"
	subj := platform.StoredSubject("orders", key, 4)
	// A group member terminates an event without copying it; a worker
	// dies on the job's last attempt (the lease lapses, the broker gives
	// up at the next pull: MAX_DELIVERIES).
	giveUp(t, ctx, js, "orders", "orders."+key, subj, platform.PartitionConsumer("email-notifier", platform.PartitionOf(key, 4)), "email-notifier", true)
	giveUp(t, ctx, js, "refund-jobs", "refund-jobs.refund.42", "refund-jobs.refund.42", platform.QueueConsumer, "", false)

	for _, c := range []struct {
		object, subject, group string
		class                  dlq.ErrorClass
	}{
		{"orders", subj, "email-notifier", dlq.ClassTerminated},
		{"refund-jobs", "refund-jobs.refund.42", "refund-jobs", dlq.ClassMaxDeliveries},
	} {
		var e dlq.Entry
		natstest.WaitFor(t, 30*time.Second, func() error {
			es, err := dlq.Read(ctx, js, c.object)
			if err != nil || len(es) != 1 {
				return fmt.Errorf("DLQ of %s: %d entries (%v)", c.object, len(es), err)
			}
			e = es[0]
			return nil
		})
		if e.Class != c.class || string(e.Payload) != "payload of "+c.subject || e.Headers.Get("X-Order") != "42" ||
			e.Tenant != "harbor-retail" || e.Subject != c.subject || e.Stream != platform.StreamName(c.object) || e.StreamSeq == 0 ||
			e.Group != c.group || e.Attempts != 1 || e.LastFailure.IsZero() || e.Published.IsZero() {
			t.Errorf("DLQ entry of %s incomplete: %+v", c.object, e)
		}
	}
}

// giveUp publishes one event and receives it through consumer, then
// terminates it without a DLQ copy (term) or abandons it as a crashed
// client would (the lease lapses; one more pull lets the broker count
// the attempt and give up).
func giveUp(t *testing.T, ctx context.Context, js jetstream.JetStream, object, pubSubj, storedSubj, consumer, group string, term bool) {
	t.Helper()
	h := nats.Header{"X-Order": []string{"42"}, platform.HeaderTenant: []string{"harbor-retail"}}
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: pubSubj, Header: h, Data: []byte("payload of " + storedSubj)}, jetstream.WithMsgID("evt-"+object)); err != nil {
		t.Fatal(err)
	}
	c, err := js.Consumer(ctx, platform.StreamName(object), consumer)
	if err != nil {
		t.Fatal(err)
	}
	var opts []jetstream.FetchOpt
	if group != "" {
		opts = append(opts, jetstream.FetchPriorityGroup(group))
	}
	natstest.WaitFor(t, 20*time.Second, func() error {
		batch, err := c.Fetch(10, append(opts, jetstream.FetchMaxWait(time.Second))...)
		if err != nil {
			return err
		}
		found := false
		for m := range batch.Messages() {
			if m.Subject() != storedSubj {
				_ = m.Ack() // a canary
				continue
			}
			found = true
			if term {
				if err := m.TermWithReason("gave up without a copy"); err != nil {
					return err
				}
			}
		}
		if !found {
			return errors.New(storedSubj + " not delivered yet")
		}
		return nil
	})
	if !term {
		time.Sleep(1500 * time.Millisecond) // the 1 s lease lapses
		if batch, err := c.Fetch(1, append(opts, jetstream.FetchMaxWait(time.Second))...); err == nil {
			for m := range batch.Messages() {
				_ = m.Ack() // a canary
			}
		}
	}
}
