package browsertest_test

import (
	"maps"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/daemon/daemontest"
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
	return &fixture{d: d, base: "http://" + d.HTTPAddr().String(), creds: map[string]string{"admin@platform": d.AdminCreds(t)}}
}

// tenantTopic creates tenant with topic (review: required when review)
// and n DLQ entries, and users; it returns the tenant's JetStream.
func (f *fixture) tenantTopic(t *testing.T, tenant, topic string, review bool, n int, users ...string) jetstream.JetStream {
	t.Helper()
	js, creds := f.d.TenantTopic(t, tenant, topic, review, n, users...)
	maps.Copy(f.creds, creds)
	return js
}
