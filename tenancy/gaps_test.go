package tenancy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/tenancy"
)

// storedCount is how many events topic orders of the reader's tenant
// holds.
func storedCount(t *testing.T, nc *nats.Conn) uint64 {
	t.Helper()
	js, _ := jetstream.New(nc)
	s, err := js.Stream(ctx(t), tenancy.StreamName("orders"))
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	return s.CachedInfo().State.Msgs
}

// waitStored polls until cond holds on the stored count (10 s at most).
func waitStored(t *testing.T, nc *nats.Conn, cond func(n uint64) bool) uint64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := storedCount(t, nc)
		if cond(n) || time.Now().After(deadline) {
			return n
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func hasAudit(t *testing.T, m *tenancy.Manager, tenant, action string) *tenancy.Record {
	t.Helper()
	rs, err := m.Audit(ctx(t), tenancy.AuditFilter{Tenant: tenant, Limit: 1000})
	if err != nil {
		t.Fatalf("audit: %v", err)
	}
	for i := len(rs) - 1; i >= 0; i-- {
		if rs[i].Action == action {
			return &rs[i]
		}
	}
	return nil
}

// With policy throttle, acknowledged publishes (nats.go jetstream.Publish,
// `nats pub --jetstream`) are slowed by delayed acks and none is lost;
// fire-and-forget publishes (`nats pub`) beyond the bounded throttle queue
// cannot be slowed by NATS: each one lost is counted (usage Dropped, the
// dropped metric) and a quota.hit is audited, so stored + dropped equals
// what was sent.
func TestThrottleEveryPathNoSilentLoss(t *testing.T) {
	e := start(t, 3)
	prod := e.rateLimited("flood", 100, tenancy.PolicyThrottle)
	reader := e.mustConnect(e.user("flood", "reader", nil, []string{"orders"}), "reader", 0)

	// nats.go: 4 publishers on different nodes, 100 synchronous publishes
	// each, at 4x the quota: all acked, slowed to the quota.
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed []error
	for i := range 4 {
		js := e.jetStream(prod, "producer", i%3)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				pctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := js.Publish(pctx, "orders.k", []byte("x"))
				cancel()
				if err != nil {
					mu.Lock()
					failed = append(failed, err)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	t.Logf("nats.go: 400 acknowledged publishes at quota 100/s took %s, %d failed", took, len(failed))
	if len(failed) > 0 {
		t.Fatalf("acknowledged publishes failed under throttle: %v", failed[0])
	}
	if took < 3*time.Second {
		t.Errorf("400 publishes at quota 100/s took %s: not throttled", took)
	}
	if n := storedCount(t, reader); n != 400 {
		t.Fatalf("stored %d of 400 acknowledged publishes", n)
	}

	cli := natsCLI(t)
	url := e.f.Node(1).ClientURL()

	// nats pub --jetstream: every publish waits for its (delayed) ack.
	start = time.Now()
	out, err := exec.Command(cli, "--server", url, "--creds", prod, "--inbox-prefix", tenancy.InboxPrefix("producer"),
		"--timeout", "10s", "pub", "--jetstream", "orders.k", "--count", "300", "x").CombinedOutput()
	if err != nil {
		t.Fatalf("nats pub --jetstream: %v\n%s", err, out[max(0, len(out)-2000):])
	}
	t.Logf("nats pub --jetstream --count 300 at quota 100/s: %s", time.Since(start))
	if n := waitStored(t, reader, func(n uint64) bool { return n >= 700 }); n != 700 {
		t.Fatalf("stored %d after nats pub --jetstream, want 700 (none lost)", n)
	}

	// nats pub (core, fire and forget): 1000 at once.
	before, _ := e.m.Usage(ctx(t), "flood")
	if out, err := runNats(t, cli, url, prod, "producer", "pub", "orders.k", "--count", "1000", "x"); err != nil {
		t.Fatalf("nats pub: %v\n%s", err, out)
	}
	var stored uint64
	var dropped uint64
	deadline := time.Now().Add(15 * time.Second)
	for {
		stored = storedCount(t, reader) - 700
		us, _ := e.m.Usage(ctx(t), "flood")
		dropped = us[0].Dropped - before[0].Dropped
		if stored+dropped >= 1000 || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("nats pub --count 1000 (fire and forget) at quota 100/s: %d stored, %d dropped and counted", stored, dropped)
	if stored+dropped != 1000 || dropped == 0 || stored < 250 {
		t.Errorf("stored %d + dropped %d != 1000 sent (or nothing was held back)", stored, dropped)
	}
	if r := hasAudit(t, e.m, "flood", tenancy.ActionQuotaHit); r == nil {
		t.Errorf("no quota.hit audit record")
	} else {
		t.Logf("audit: %s", r.Detail)
	}
}

// Usage and its metrics are cluster-wide: with two managers (two
// daemons) and a tenant connected to all three nodes, both report the
// same totals, including events taken by the other manager's ingest.
// Resume returns only when the ingest serves: a publish made right after
// it, on a fresh connection, is acknowledged at the first attempt.
func TestUsageClusterWideAndResumeServing(t *testing.T) {
	e := start(t, 3)
	m2 := e.another()
	e.tenant("wide", tenancy.DefaultQuota())
	prod := e.user("wide", "producer", []string{"orders"}, nil)

	// What both daemons' ingests did, for a failure's message.
	state := func() string {
		var b strings.Builder
		for i, m := range []*tenancy.Manager{e.m, m2} {
			in, out, _ := m.IngestCounts("wide")
			fmt.Fprintf(&b, "manager %d: leading %v, ingest on %q received %d sent %d; ", i+1, m.Leading("wide"), m.IngestServer("wide"), in, out)
		}
		return b.String()
	}
	// Publishers retry an unacknowledged publish with its Nats-Msg-Id (the
	// contract in doc.go): a lease handover, which a loaded machine can
	// cause by delaying a renewal, may drop a publish routed to the old
	// holder's node. A retried event may be counted twice by the ingests
	// (never stored twice); retries says how many there were.
	retries, seq := 0, 0
	var idBytes uint64 // the Nats-Msg-Id header lines, stored with each event
	publish := func(n int) {
		t.Helper()
		for i := range 3 {
			js := e.jetStream(prod, "producer", i)
			for k := range n {
				seq++
				idBytes += uint64(len(fmt.Sprintf("Nats-Msg-Id: wide-%d\r\n", seq)))
				for attempt := 0; ; attempt++ {
					pctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					_, err := js.Publish(pctx, "orders.k", []byte("0123456789"), jetstream.WithMsgID(fmt.Sprintf("wide-%d", seq)))
					cancel()
					if err == nil {
						break
					}
					if attempt == 3 {
						t.Fatalf("publish %d via node %d: %v (%d attempts); %s", k, i, err, attempt+1, state())
					}
					retries++
					t.Logf("publish %d via node %d: %v; retrying; %s", k, i, err, state())
				}
			}
		}
	}
	publish(20) // 60, taken by the first manager's ingest (it created the tenant)
	if _, err := e.m.Suspend(ctx(t), "test", "wide"); err != nil {
		t.Fatal(err)
	}
	// Resume through the other daemon: it runs the ingest now (or the
	// first takes the lease back at its heartbeat; both count).
	if _, err := m2.Resume(ctx(t), "test", "wide"); err != nil {
		t.Fatalf("resume: %v", err)
	}
	// Right after resume, first attempt, every node: taken, not lost. The
	// ack may be slow on a loaded machine even when the ingest forwarded
	// the event, so it gets the 5 s the other publishes get.
	for i := range 3 {
		js := e.jetStream(prod, "producer", i)
		pctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := js.Publish(pctx, "orders.k", []byte("0123456789"))
		cancel()
		if err != nil {
			t.Fatalf("publish via node %d right after resume: %v; %s", i, err, state())
		}
	}
	publish(10) // 3 + 30 more
	tjs, err := e.m.TenantJetStream("wide")
	if err != nil { // the ingest (and the tenant's runtime) moved to the other daemon
		tjs, err = m2.TenantJetStream("wide")
	}
	if err != nil {
		t.Fatal(err)
	} else if st, err := tjs.Stream(ctx(t), tenancy.StreamName("orders")); err != nil {
		t.Fatal(err)
	} else if info, err := st.Info(ctx(t)); err != nil {
		t.Fatal(err)
	} else if info.State.Msgs != 93 {
		t.Fatalf("stream holds %d events, want 93: none lost, none stored twice (%d retries)", info.State.Msgs, retries)
	}
	t.Logf("leading after resume: first manager %v, second %v", e.m.Leading("wide"), m2.Leading("wide"))
	// Keep a connection on each node for the connection count.
	for i := range 3 {
		e.mustConnect(prod, "producer", i)
	}
	var accepted uint64
	for i, m := range []*tenancy.Manager{e.m, m2} {
		us, err := m.Usage(ctx(t), "wide")
		if err != nil || len(us) != 1 {
			t.Fatalf("usage from manager %d: %v %v", i+1, us, err)
		}
		u := us[0]
		t.Logf("usage from manager %d: %s bytes_in=%d", i+1, u, u.BytesIn)
		// Bytes as stored: the 10-byte payload, the stamped header and the
		// event's Nats-Msg-Id (a retried event may be counted twice).
		per := uint64(10 + len("NATS/1.0\r\n"+tenancy.HeaderTenant+": wide\r\n\r\n"))
		want := per*93 + idBytes
		if u.MsgsIn < 93 || u.MsgsIn > uint64(93+retries) || u.BytesIn < want || u.BytesIn > want+uint64(retries)*(per+32) {
			t.Errorf("manager %d: msgs_in=%d bytes_in=%d, want the cluster totals 93 and %d (%d retries may add as many)", i+1, u.MsgsIn, u.BytesIn, want, retries)
		}
		if i == 0 {
			accepted = u.MsgsIn
		} else if u.MsgsIn != accepted {
			t.Errorf("manager 2: msgs_in=%d, manager 1 said %d", u.MsgsIn, accepted)
		}
		if u.Connections < 3 {
			t.Errorf("manager %d: %d connections, want at least the 3 kept open on 3 nodes", i+1, u.Connections)
		}
	}
	// The metrics of either daemon are the same cluster totals.
	for i, m := range []*tenancy.Manager{e.m, m2} {
		if got := tenantMetric(t, m, "platform_tenant_publish_events_total", "wide"); got != float64(accepted) {
			t.Errorf("manager %d: platform_tenant_publish_events_total{tenant=\"wide\"} = %v, want %d as usage says", i+1, got, accepted)
		}
	}
}

// user update changes a live user's permissions: same .creds, its
// connection is closed by the servers and reconnects by itself with the
// new permissions; the change is audited with before and after; bad
// input changes nothing.
func TestUserUpdateLive(t *testing.T) {
	e := start(t, 3)
	e.tenant("live", tenancy.DefaultQuota())
	creds := e.user("live", "app", []string{"orders"}, nil)
	credsBefore, _ := os.ReadFile(creds)
	var mu sync.Mutex
	var asyncErrs []string
	reconnected := make(chan struct{}, 4)
	nc, err := nats.Connect(e.f.ClientURLs(), nats.UserCredentials(creds), nats.CustomInboxPrefix(tenancy.InboxPrefix("app")),
		nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond),
		nats.ReconnectHandler(func(*nats.Conn) { reconnected <- struct{}{} }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			mu.Lock()
			asyncErrs = append(asyncErrs, err.Error())
			mu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	pub := func(subject string) error {
		pctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := js.Publish(pctx, subject, []byte("x"))
		return err
	}
	if err := pub("orders.k"); err != nil {
		t.Fatalf("allowed publish: %v", err)
	}
	if err := pub("shipment-jobs.x"); err == nil {
		t.Fatalf("publish to shipment-jobs allowed before the update")
	}

	// Bad input: clear errors, nothing changes.
	for name, u := range map[string]tenancy.UserSpec{
		"unknown user":  {Name: "ghost", Pub: []string{"orders"}},
		"unknown topic": {Name: "app", Pub: []string{"payments"}},
		"empty":         {Name: "app"},
		"bad name":      {Name: "App!", Pub: []string{"orders"}},
	} {
		_, err := e.m.UpdateUser(ctx(t), "test", "live", u)
		if !errors.Is(err, tenancy.ErrInvalid) && !errors.Is(err, tenancy.ErrNotFound) {
			t.Errorf("%s: err = %v, want ErrInvalid or ErrNotFound", name, err)
		}
	}

	u, err := e.m.UpdateUser(ctx(t), "test", "live", tenancy.UserSpec{Name: "app", Pub: []string{"orders", "shipment-jobs"}})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	if strings.Join(u.Pub, ",") != "orders,shipment-jobs" {
		t.Errorf("updated user = %+v", u)
	}
	select {
	case <-reconnected:
	case <-time.After(10 * time.Second):
		t.Fatalf("the live connection was not re-established after the update")
	}
	var lastErr error
	for range 20 { // the reconnect may still be settling its subscriptions
		if lastErr = pub("shipment-jobs.x"); lastErr == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if lastErr != nil {
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("publish to shipment-jobs after the update, same creds, same nats.Conn: %v (connected to %s; async errors: %q; ingest leading: %v)",
			lastErr, nc.ConnectedServerName(), asyncErrs, e.m.Leading("live"))
	}
	if err := pub("orders.k"); err != nil {
		t.Fatalf("orders after the update: %v", err)
	}
	if after, _ := os.ReadFile(creds); string(after) != string(credsBefore) {
		t.Errorf("creds changed")
	}
	r := hasAudit(t, e.m, "live", "user.update")
	if r == nil || r.Target != "app" {
		t.Fatalf("no user.update audit record: %+v", r)
	}
	b, _ := json.Marshal(r.Before)
	a, _ := json.Marshal(r.After)
	if !strings.Contains(string(a), `"pub":["orders","shipment-jobs"]`) || !strings.Contains(string(b), `"pub":["orders"]`) {
		t.Errorf("audit before/after do not show the permissions: before %s after %s", b, a)
	}
	mu.Lock()
	t.Logf("async errors seen by the client: %v", asyncErrs)
	mu.Unlock()

	// Revoke: the scope leaves the account, the connection cannot come back.
	if _, err := e.m.RevokeUser(ctx(t), "test", "live", "app"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.connect(creds, "app", 0); err == nil {
		t.Fatalf("a revoked scoped user connected")
	}
}

// A tenant user's publish or subscribe outside its permissions is
// audited as auth.denied naming the tenant, user, subject and operation,
// and counted in usage, for nats.go and the real nats CLI alike.
func TestPermissionViolationsAudited(t *testing.T) {
	e := start(t, 3)
	for i := range 3 {
		e.m.WatchViolations(e.f.Node(i).Server())
	}
	e.tenant("strict", tenancy.DefaultQuota())
	creds := e.user("strict", "app", []string{"orders"}, nil)
	nc := e.mustConnect(creds, "app", 1)
	_ = nc.Publish("shipment-jobs.x", []byte("x"))
	if _, err := nc.SubscribeSync("orders.>"); err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	want := map[string]bool{`publish on subject "shipment-jobs.x"`: false, `subscribe on subject "orders.>"`: false}
	if cli, err := exec.LookPath("nats"); err == nil {
		if out, err := runNats(t, cli, e.f.Node(2).ClientURL(), creds, "app", "pub", "stored.orders.k", "spoof"); err != nil {
			t.Logf("nats pub outside the ACL: %v %s", err, out)
		}
		want[`publish on subject "stored.orders.k"`] = false
	} else {
		t.Log("nats CLI not on PATH: its half is skipped")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		rs, err := e.m.Audit(ctx(t), tenancy.AuditFilter{Tenant: "strict", Limit: 1000})
		if err != nil {
			t.Logf("audit (retried): %v", err)
		}
		for _, r := range rs {
			if r.Action != tenancy.ActionAuthDenied || r.Target != "app" {
				continue
			}
			for k := range want {
				if strings.Contains(r.Detail, k) && strings.Contains(r.Detail, "user app") {
					want[k] = true
				}
			}
		}
		missing := 0
		for _, ok := range want {
			if !ok {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("audit records missing: %v (records: %+v)", want, rs)
		}
		time.Sleep(200 * time.Millisecond)
	}
	us, err := e.m.Usage(ctx(t), "strict")
	if err != nil || us[0].Denied < uint64(len(want)) {
		t.Errorf("usage denied = %+v, %v; want >= %d", us, err, len(want))
	}
}
