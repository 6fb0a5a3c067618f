package daemontest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/redrive/redrivetest"
	"github.com/msgplatform/platform/tenancy"
)

// AdminCreds is the content of the admin credentials file the daemon
// wrote.
func (d *Daemon) AdminCreds(t testing.TB) string {
	t.Helper()
	admin, err := os.ReadFile(filepath.Clean(d.Creds()))
	if err != nil {
		t.Fatal(err)
	}
	return string(admin)
}

// TenantTopic creates tenant with an R1 topic owned by topic+"-team"
// (review: required when review), n DLQ entries of group ledger on it,
// and users who may publish to and consume the topic. It returns the
// tenant's JetStream, closed when the test ends, and the users' .creds
// keyed user@tenant.
func (d *Daemon) TenantTopic(t testing.TB, tenant, topic string, review bool, n int, users ...string) (jetstream.JetStream, map[string]string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m := d.Tenants()
	if _, err := m.Create(ctx, "test", tenancy.DefaultSpec(tenant)); err != nil {
		t.Fatal(err)
	}
	spec := platform.DefaultTopicSpec(topic)
	spec.Replicas, spec.Owner = 1, topic+"-team"
	if review {
		spec.Review = platform.ReviewRequired
	}
	if _, err := m.ApplyTopic(ctx, "test", tenant, spec, catalog.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	creds := map[string]string{}
	for _, u := range users {
		uc, err := m.AddUser(ctx, "test", tenant, tenancy.UserSpec{Name: u, Pub: []string{topic}, Sub: []string{topic}})
		if err != nil {
			t.Fatal(err)
		}
		creds[u+"@"+tenant] = string(uc.Creds)
	}
	js := d.TenantJetStream(t, ctx, tenant, "test-"+tenant)
	redrivetest.DeadLetter(t, js, tenancy.StoredName(topic), "ledger", 0, n, "card %d declined by the test")
	return js, creds
}

// TenantJetStream connects to tenant's account as a service connection
// named name and returns its JetStream; the connection closes when the
// test ends.
func (d *Daemon) TenantJetStream(t testing.TB, ctx context.Context, tenant, name string) jetstream.JetStream {
	t.Helper()
	nc, err := d.ConnectTenant(ctx, tenant, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return natstest.JetStream(t, nc)
}
