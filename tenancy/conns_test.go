package tenancy_test

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/tenancy"
)

// The connection quota is the tenant's: the platform's own connections in
// the account (the ingest runtime, a service user) do not take its slots,
// the connection past the quota is refused with nats-server's error,
// usage counts only the tenant's connections, and raising the quota lets
// the next one in without a restart. Before the reservation, the
// platform's connections left a tenant with a quota of 2 none at all.
func TestConnectionQuotaExcludesPlatform(t *testing.T) {
	e, q, _ := tinyTenant(t)
	m, c := e.m, ctx(t)
	creds := e.user("tiny", "app", []string{"orders"}, nil)

	// The platform holds its 3 (the runtime's 2, a service): the tenant
	// still gets 2.
	for range 2 {
		e.mustConnect(creds, "app", 0)
	}
	// Every node must count all five (the platform's three, the tenant's
	// two) before the probing starts: a node that has not yet heard of
	// another's connections admits one too many, then closes its own
	// newest local connection (nats-server's own enforcement), which
	// could be one of the tenant's two and leave room for a third.
	tn, err := m.Get(c, "tiny")
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 15*time.Second, func() error {
		for i := range 3 {
			acc, err := e.f.Node(i).Server().LookupAccount(tn.Account)
			if err != nil {
				return fmt.Errorf("node %d: %v", i, err)
			}
			if n := acc.NumConnections(); n != 5 {
				return fmt.Errorf("node %d counts %d connections of the account, want 5; %s", i, n, accountConns(t, e, "tiny"))
			}
		}
		return nil
	})
	refused := func() bool {
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			nc, err := e.connect(creds, "app", 0)
			if err != nil {
				if !strings.Contains(strings.ToLower(err.Error()), "maximum account active connections") {
					t.Fatalf("connection past the quota: unexpected error %v", err)
				}
				return true
			}
			nc.Close() // the servers' counts had not converged yet
			time.Sleep(100 * time.Millisecond)
		}
		return false
	}
	if !refused() {
		t.Fatalf("a third connection of a tenant with a connection quota of 2 was accepted; %s", accountConns(t, e, "tiny"))
	}
	us, err := m.Usage(c, "tiny")
	if err != nil {
		t.Fatal(err)
	}
	if len(us) != 1 || us[0].Connections != 2 || us[0].ConnQuota != 2 {
		t.Fatalf("usage: %+v, want 2 connections of a quota of 2 (platform connections excluded)", us)
	}

	// Raised live: the third connects.
	q.Connections = 3
	if _, err := m.Update(c, "test", "tiny", q); err != nil {
		t.Fatal(err)
	}
	var third *nats.Conn
	deadline := time.Now().Add(5 * time.Second)
	for third == nil {
		if third, err = e.connect(creds, "app", 0); err != nil {
			if time.Now().After(deadline) {
				t.Fatalf("third connection after raising the quota to 3: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	third.Close()
}

// While a platform connection is down, the servers would let a tenant
// open one more connection than its quota (the account's limit includes
// the platform's reservation), and the platform's connection would then be
// refused when it came back. The manager closes the newest tenant
// connection over the quota, so the platform gets its slot back.
func TestConnectionQuotaHoldsWhilePlatformReconnects(t *testing.T) {
	e, _, svc := tinyTenant(t)
	m, c := e.m, ctx(t)
	creds := e.user("tiny", "app", []string{"orders"}, nil)
	first, second := e.mustConnect(creds, "app", 0), e.mustConnect(creds, "app", 1)

	// The platform's service connection drops: its slot is free, and the
	// tenant takes it with a third connection. Within a few seconds the
	// tenant is back at its quota: the manager closes the newest
	// connection. (nats-server, enforcing the account's limit while its
	// cluster-wide counts converge, may also close a server's newest local
	// connection, the third or one of the others: then the servers did it
	// and the manager had nothing to do.)
	svc.Close()
	var third *nats.Conn
	var err error
	deadline := time.Now().Add(5 * time.Second)
	for third == nil {
		third, err = e.connect(creds, "app", 2)
		if err != nil {
			if time.Now().After(deadline) {
				t.Fatalf("a third connection with the platform's slot free: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	t.Cleanup(third.Close)
	open := func() int {
		n := 0
		for _, nc := range []*nats.Conn{first, second, third} {
			if !nc.IsClosed() {
				n++
			}
		}
		return n
	}
	natstest.WaitFor(t, 20*time.Second, func() error {
		if n := open(); n > 2 {
			return fmt.Errorf("the tenant still has %d connections open, over its quota of 2", n)
		}
		return nil
	})
	byServers := func(nc *nats.Conn) bool {
		err := nc.LastError()
		return err != nil && strings.Contains(strings.ToLower(err.Error()), "maximum account active connections")
	}
	byManager := third.IsClosed() && !byServers(third)
	t.Logf("open: first %v, second %v, third %v; the third closed by the manager: %v", !first.IsClosed(), !second.IsClosed(), !third.IsClosed(), byManager)
	// The platform's connection comes back.
	svc, err = m.ConnectTenant(c, "tiny", "test-svc")
	if err != nil {
		t.Fatalf("the service connection, back: %v", err)
	}
	t.Cleanup(svc.Close)
	us, err := m.Usage(c, "tiny")
	if err != nil || len(us) != 1 || us[0].Connections > 2 {
		t.Fatalf("usage: %+v, %v; want at most the quota, 2 connections", us, err)
	}
	if !byManager {
		return // the servers' own limit did it; nothing to audit
	}
	var hit bool
	natstest.WaitFor(t, 10*time.Second, func() error {
		recs, err := m.Audit(c, tenancy.AuditFilter{Tenant: "tiny"})
		if err != nil {
			return err
		}
		for _, r := range recs {
			if r.Action == tenancy.ActionQuotaHit && strings.Contains(r.Detail, "over its quota of 2") {
				hit = true
			}
		}
		if !hit {
			return fmt.Errorf("no quota.hit record for the closed connection among %d", len(recs))
		}
		return nil
	})
}

// tinyTenant starts a 3-node fabric and a manager reserving the
// connections it holds (its runtime's and one service's), and creates
// tenant "tiny" with a connection quota of 2 (returned) and that service's
// connection. The manager's warnings are shown if the test fails.
func tinyTenant(t *testing.T) (*env, tenancy.Quota, *nats.Conn) {
	t.Helper()
	e := &env{t: t, f: natstest.RunFabric(t, 3, natstest.WithSyncAlways(false)), dir: t.TempDir()}
	e.m = e.another(func(c *tenancy.Config) {
		c.Local = nil // pulls gated on the ingest's connection: no gate connections
		c.PlatformConns = tenancy.RuntimeConns + 1
		c.Logger = natstest.LogOnFailure(t, slog.LevelWarn, "the manager's warnings")
	})
	q := tenancy.DefaultQuota()
	q.Connections = 2
	e.tenant("tiny", q)
	svc, err := e.m.ConnectTenant(ctx(t), "tiny", "test-svc")
	if err != nil {
		t.Fatalf("service connection: %v", err)
	}
	t.Cleanup(svc.Close)
	return e, q, svc
}

// accountConns lists the connections of tenant's account on every node,
// for a failure's message.
func accountConns(t *testing.T, e *env, tenant string) string {
	tn, err := e.m.Get(ctx(t), tenant)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for i := range 3 {
		cz, err := e.f.Node(i).Server().Connz(&server.ConnzOptions{Account: tn.Account, Username: true})
		if err != nil {
			fmt.Fprintf(&b, "node %d: %v; ", i, err)
			continue
		}
		fmt.Fprintf(&b, "node %d:", i)
		for _, c := range cz.Conns {
			fmt.Fprintf(&b, " [%d %q issuer %.8s start %s]", c.Cid, c.Name, c.IssuerKey, c.Start.Format("15:04:05.000"))
		}
		b.WriteString("; ")
	}
	return b.String()
}
