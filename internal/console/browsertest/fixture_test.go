package browsertest_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/daemon/daemontest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/redrive/redrivetest"
	"github.com/msgplatform/platform/tenancy"
)

// fixture is a running platformd with tenants, each with a topic whose
// DLQ holds entries, and users whose .creds the browser signs in with.
type fixture struct {
	d     *daemontest.Daemon
	base  string // http://host:port
	creds map[string]string
}

func start(t *testing.T) *fixture {
	t.Helper()
	d := daemontest.Start(t, 1)
	admin, err := os.ReadFile(filepath.Clean(d.Creds()))
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{d: d, base: "http://" + d.HTTPAddr().String(), creds: map[string]string{"admin@platform": string(admin)}}
}

// tenantTopic creates tenant with topic (review: required when review)
// and n DLQ entries, and users; it returns the tenant's JetStream.
func (f *fixture) tenantTopic(t *testing.T, tenant, topic string, review bool, n int, users ...string) jetstream.JetStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m := f.d.Tenants()
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
	for _, u := range users {
		uc, err := m.AddUser(ctx, "test", tenant, tenancy.UserSpec{Name: u, Pub: []string{topic}, Sub: []string{topic}})
		if err != nil {
			t.Fatal(err)
		}
		f.creds[u+"@"+tenant] = string(uc.Creds)
	}
	nc, err := f.d.ConnectTenant(ctx, tenant, "test-"+tenant)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	redrivetest.DeadLetter(t, js, tenancy.StoredName(topic), "ledger", 0, n, "card %d declined by the test")
	return js
}
