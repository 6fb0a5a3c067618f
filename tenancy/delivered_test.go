package tenancy_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/tenancy"
)

// Usage's messages out are what the tenant's own connections received:
// not the platform's (the ingest receives every event, the runtime its
// JetStream API replies), nor the streams' or the replicas' traffic that
// the servers' account statistics also count. A connection counts while
// open and, once closed, through its disconnect event, once across two
// managers.
func TestUsageOutCountsTheTenantsOwnConnectionsOnce(t *testing.T) {
	e := start(t, 3)
	m2 := e.another()
	e.tenant("out", tenancy.DefaultQuota())
	prod := e.user("out", "producer", []string{"orders"}, nil)

	out := func() (msgs, bytes [2]int64) {
		t.Helper()
		for i, m := range []*tenancy.Manager{e.m, m2} {
			us, err := m.Usage(ctx(t), "out")
			if err != nil || len(us) != 1 {
				t.Fatalf("usage from manager %d: %v %v", i+1, us, err)
			}
			msgs[i], bytes[i] = us[0].MsgsOut, us[0].BytesOut
		}
		return msgs, bytes
	}
	if msgs, _ := out(); msgs != [2]int64{0, 0} {
		t.Fatalf("a tenant whose users received nothing has msgs_out %v (manager 1, 2), want 0: the platform's own connections counted", msgs)
	}

	const n = 50
	nc := e.mustConnect(prod, "producer", 1)
	js, _ := jetstream.New(nc)
	for i := range n {
		if _, err := js.Publish(ctx(t), "orders.k", []byte(fmt.Sprintf("event-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	// The producer received its n acks, nothing else.
	msgs, bytes := out()
	if msgs != [2]int64{n, n} || bytes[0] != bytes[1] || bytes[0] <= 0 {
		t.Fatalf("open connection: msgs_out %v, bytes_out %v (manager 1, 2), want %d acks from both", msgs, bytes, n)
	}
	openBytes := bytes[0]
	nc.Close()
	// Closed: counted through its disconnect event, by one manager.
	natstest.WaitFor(t, 10*time.Second, func() error {
		if msgs, bytes := out(); msgs != [2]int64{n, n} || bytes != [2]int64{openBytes, openBytes} {
			return fmt.Errorf("closed connection: msgs_out %v, bytes_out %v (manager 1, 2), want %d and %d from both", msgs, bytes, n, openBytes)
		}
		return nil
	})
	time.Sleep(time.Second) // a second count of the event would show by now
	if msgs, _ := out(); msgs != [2]int64{n, n} {
		t.Fatalf("closed connection counted twice? msgs_out %v (manager 1, 2), want %d", msgs, n)
	}
	// The metrics say the same.
	events, bytesOut := tenantMetric(t, m2, "platform_tenant_delivered_events", "out"), tenantMetric(t, m2, "platform_tenant_delivered_bytes", "out")
	if events != n || bytesOut != float64(openBytes) {
		t.Errorf("metrics: delivered events %v, bytes %v; want %d and %d", events, bytesOut, n, openBytes)
	}
}

// Usage says when a node is missing from its figures: with a node down,
// the tenant's connections there and what they received cannot be
// counted, and the usage and its metric say the figures are partial
// instead of showing them as the whole. Once the node is back, they are
// whole again.
func TestUsageSaysWhenANodeIsMissing(t *testing.T) {
	e := start(t, 3)
	e.tenant("gap", tenancy.DefaultQuota())
	prod := e.user("gap", "producer", []string{"orders"}, nil)
	for i := range 3 {
		e.mustConnect(prod, "producer", i) // NoReconnect: the one on the killed node goes
	}
	// waitUsage waits until the usage of "gap" has the partial note
	// (as a substring; "" for whole figures) and connections wanted.
	waitUsage := func(when string, timeout time.Duration, partial string, conns int) {
		t.Helper()
		natstest.WaitFor(t, timeout, func() error {
			uctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			us, err := e.m.Usage(uctx, "gap")
			if err != nil {
				return err
			}
			if len(us) != 1 {
				return fmt.Errorf("usage: %d tenants, want 1", len(us))
			}
			u := us[0]
			if (partial == "") != (u.Partial == "") || !strings.Contains(u.Partial, partial) || u.Connections != conns {
				return fmt.Errorf("%s: partial %q, connections %d; want partial %q and %d", when, u.Partial, u.Connections, partial, conns)
			}
			return nil
		})
	}
	waitUsage("every node up", 15*time.Second, "", 3)
	if v := tenantMetric(t, e.m, "platform_tenant_usage_partial", "gap"); v != 0 {
		t.Fatalf("platform_tenant_usage_partial with every node up: %v, want 0", v)
	}

	e.f.Kill(2)
	waitUsage("a node down", 30*time.Second, "connections counted on 2 of 3 servers (the others did not answer); messages out to open connections counted on fewer than 3 servers", 2)
	if v := tenantMetric(t, e.m, "platform_tenant_usage_partial", "gap"); v != 1 {
		t.Fatalf("platform_tenant_usage_partial with a node down: %v, want 1", v)
	}

	e.f.Restart(2)
	e.mustConnect(prod, "producer", 2)
	waitUsage("the node back", 30*time.Second, "", 3)
}

// A suspended tenant's usage still shows its storage against its quota:
// its streams are kept, and no connection may enter its account, so the
// figures come through the system account. They are the figures the
// tenant's own account info gave before the suspension (memory, disk,
// streams and consumers per tier, and the quotas), in the usage and in
// the metrics, not zeros that read as lost data.
func TestUsageOfASuspendedTenantShowsItsStorage(t *testing.T) {
	e := start(t, 3)
	q := tenancy.DefaultQuota()
	q.Storage.R3.Disk = 3 << 30
	e.tenant("held", q)
	prod := e.user("held", "producer", []string{"orders", "shipment-jobs"}, nil)
	js := e.jetStream(prod, "producer", 1)
	for i := range 40 {
		subj := fmt.Sprintf("orders.k%d", i%7)
		if i%4 == 0 {
			subj = "shipment-jobs.pack"
		}
		if _, err := js.Publish(ctx(t), subj, []byte(strings.Repeat("x", 100+i))); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	usage := func(when string) tenancy.Usage {
		t.Helper()
		us, err := e.m.Usage(ctx(t), "held")
		if err != nil || len(us) != 1 {
			t.Fatalf("usage %s: %v (%d tenants)", when, err, len(us))
		}
		return us[0]
	}
	// What JetStream counts against the R3 tier: each stream's bytes once
	// per replica. The account info reaches it once every node has
	// reported its replicas' use.
	tjs, err := e.m.TenantJetStream("held")
	if err != nil {
		t.Fatal(err)
	}
	var want uint64
	for name := range tjs.StreamNames(ctx(t)).Name() {
		s, err := tjs.Stream(ctx(t), name)
		if err != nil {
			t.Fatal(err)
		}
		want += s.CachedInfo().State.Bytes * uint64(s.CachedInfo().Config.Replicas)
	}
	var before tenancy.Usage
	natstest.WaitFor(t, 15*time.Second, func() error {
		if before = usage("while active"); before.Storage["R3"].Disk != want {
			return fmt.Errorf("R3 disk while active: %d, want %d (each stream's bytes times its replicas)", before.Storage["R3"].Disk, want)
		}
		return nil
	})
	r3 := before.Storage["R3"]
	if r3.Disk == 0 || r3.Streams == 0 || r3.Consumers == 0 || r3.DiskQuota != 3<<30 || before.Partial != "" {
		t.Fatalf("usage while active: R3 %+v, partial %q; want disk, streams and consumers used and a 3 GiB quota", r3, before.Partial)
	}
	diskMetric := func() float64 {
		return tenantMetric(t, e.m, "platform_tenant_storage_bytes", "held", "tier", "R3", "kind", "disk")
	}
	if v := diskMetric(); v != float64(r3.Disk) {
		t.Fatalf("platform_tenant_storage_bytes R3 disk while active: %v, want %d", v, r3.Disk)
	}

	if _, err := e.m.Suspend(ctx(t), "test", "held"); err != nil {
		t.Fatal(err)
	}
	during := usage("while suspended")
	if during.State != tenancy.StateSuspended || during.Partial != "" {
		t.Fatalf("usage while suspended: state %s, partial %q; want suspended and whole figures", during.State, during.Partial)
	}
	for _, tier := range []string{"R1", "R3"} {
		if during.Storage[tier] != before.Storage[tier] {
			t.Errorf("%s while suspended: %+v; before the suspension: %+v", tier, during.Storage[tier], before.Storage[tier])
		}
	}
	if v := diskMetric(); v != float64(r3.Disk) {
		t.Errorf("platform_tenant_storage_bytes R3 disk while suspended: %v, want %d", v, r3.Disk)
	}

	if _, err := e.m.Resume(ctx(t), "test", "held"); err != nil {
		t.Fatal(err)
	}
	if after := usage("after resume"); after.Storage["R3"] != r3 {
		t.Errorf("R3 after resume: %+v; before the suspension: %+v", after.Storage["R3"], r3)
	}
}
