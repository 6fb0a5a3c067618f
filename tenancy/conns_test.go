package tenancy_test

import (
	"context"
	"strings"
	"testing"
	"time"

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
	f := natstest.RunFabric(t, 3, natstest.WithSyncAlways(false))
	m, err := tenancy.NewManager(f.Conn(), f.Trust(), tenancy.Config{URL: f.ClientURLs(), Servers: 3, PlatformConns: tenancy.RuntimeConns + 1})
	if err != nil {
		t.Fatal(err)
	}
	c := ctx(t)
	if err := m.Start(c); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close(context.Background()) })
	e := &env{t: t, f: f, m: m, dir: t.TempDir()}
	q := tenancy.DefaultQuota()
	q.Connections = 2
	e.tenant("tiny", q)
	svc, err := m.ConnectTenant(c, "tiny", "test-svc")
	if err != nil {
		t.Fatalf("service connection: %v", err)
	}
	t.Cleanup(svc.Close)
	creds := e.user("tiny", "app", []string{"orders"}, nil)

	// The platform holds its 3 (the runtime's 2, a service): the tenant
	// still gets 2.
	for range 2 {
		e.mustConnect(creds, "app", 0)
	}
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
		t.Fatal("a third connection of a tenant with a connection quota of 2 was accepted")
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
