package tenancy_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/tenancy"
)

// Two managers (as two daemons in node mode) on one 3-node fabric: one
// ingest per tenant is active, so a flood through every node gets the
// quota in total; when the leader's manager closes, the other takes over
// within a few seconds.
func TestOneIngestPerTenantAcrossManagers(t *testing.T) {
	e := start(t, 3)
	m2 := e.another()

	creds := e.rateLimited("harbor-retail", 300, tenancy.PolicyReject)
	// Usually the creating manager leads; m2's heartbeat may also pick
	// the new tenant up from the registry while the creator is still
	// starting its runtime and take the free lease first. Either way,
	// exactly one leads.
	var leader, standby *tenancy.Manager
	natstest.WaitFor(t, 5*time.Second, func() error {
		switch a, b := e.m.Leading("harbor-retail"), m2.Leading("harbor-retail"); {
		case a && !b:
			leader, standby = e.m, m2
		case b && !a:
			leader, standby = m2, e.m
		default:
			return fmt.Errorf("leading: the creating manager %v, the other %v", a, b)
		}
		return nil
	})
	// Both have run heartbeats since: still one.
	time.Sleep(2500 * time.Millisecond)
	if !leader.Leading("harbor-retail") || standby.Leading("harbor-retail") {
		t.Fatalf("after 2.5 s: leader leads %v, standby leads %v; want exactly the leader", leader.Leading("harbor-retail"), standby.Leading("harbor-retail"))
	}

	acked, limited := e.flood(creds, "producer", 2*time.Second)
	rate := float64(acked) / 2
	t.Logf("two managers, quota 300/s, flood over 3 nodes: %d acked (%.0f/s), %d refused", acked, rate, limited)
	if rate > 300*1.15 || rate < 300*0.8 || limited == 0 {
		t.Errorf("achieved %.0f/s with quota 300/s over two managers", rate)
	}

	// The leader's manager closes: the other takes over.
	closed := time.Now()
	if err := leader.Close(ctx(t)); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 6*time.Second, func() error {
		if !standby.Leading("harbor-retail") {
			return fmt.Errorf("the standby does not lead yet")
		}
		return nil
	})
	t.Logf("takeover after %s", time.Since(closed).Round(time.Millisecond))
	js := e.jetStream(creds, "producer", 0)
	natstest.WaitFor(t, 5*time.Second, func() error {
		c, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := js.Publish(c, "orders.after-takeover", []byte("x"))
		return err
	})
	acked, _ = e.flood(creds, "producer", time.Second)
	if r := float64(acked); r > 300*1.2 || r < 300*0.7 {
		t.Errorf("after takeover: %.0f/s with quota 300/s", r)
	}
}
