package consoletest

import (
	"maps"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/daemon/daemontest"
)

// Fixture is a running platformd with tenants, each with a topic whose
// DLQ holds entries, and users whose .creds the tests sign in with.
type Fixture struct {
	D    *daemontest.Daemon
	Base string // http://host:port
	// Creds holds each user's .creds by user@tenant; the platform's
	// admin is admin@platform.
	Creds map[string]string
}

// Start starts a platformd of nodes nodes, stopped when t ends.
func Start(t *testing.T, nodes int) *Fixture {
	t.Helper()
	d := daemontest.Start(t, nodes)
	return &Fixture{D: d, Base: "http://" + d.HTTPAddr().String(), Creds: map[string]string{"admin@platform": d.AdminCreds(t)}}
}

// TenantTopic creates tenant with topic (review: required when review)
// and n DLQ entries, and users, whose creds it adds to f.Creds; it
// returns the tenant's JetStream.
func (f *Fixture) TenantTopic(t *testing.T, tenant, topic string, review bool, n int, users ...string) jetstream.JetStream {
	t.Helper()
	js, creds := f.D.TenantTopic(t, tenant, topic, review, n, users...)
	maps.Copy(f.Creds, creds)
	return js
}
