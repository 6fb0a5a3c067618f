package daemon

import (
	"context"
	"net/http"
	"strings"

	"github.com/msgplatform/platform/internal/console"
	"github.com/msgplatform/platform/redrive"
	"github.com/msgplatform/platform/tenancy"
)

// mountConsole serves the web console (internal/console) under
// console.Prefix on the HTTP listener: users sign in with their .creds,
// which the console checks against this daemon's nodes; platform
// operators see every scope, a tenant's users their tenant's DLQs only.
// Sessions ended here (logout, a user signed out) are recorded in the
// replicated KV bucket console.EndedSessionsBucket (the installation's
// replicas, TTL the session TTL) and every platformd refuses them; a
// platformd that cannot read the bucket refuses sessions (503) rather than
// accept one it cannot check.
func (d *Daemon) mountConsole(mux *http.ServeMux) error {
	if d.redrive == nil {
		return nil
	}
	urls := make([]string, len(d.nodes))
	for i, n := range d.nodes {
		urls[i] = n.ClientURL()
	}
	v, err := d.newVerifier()
	if err != nil {
		return err
	}
	key, err := d.consoleSessionKey()
	if err != nil {
		return err
	}
	c, err := console.New(console.Config{
		URL:          strings.Join(urls, ","),
		TLS:          d.trust.ClientTLS,
		AdminAccount: d.trust.AdminAccount(),
		Tenants:      d.ConsoleTenants,
		Verifier:     v,
		SessionKey:   key,
		Ended:        console.NewKVEndedSessions(d.js, d.cfg.Durability().Replicas, console.DefaultSessionTTL),
		Redrive: func(ctx context.Context, tenant string) (*redrive.Service, error) {
			return d.RedriveFor(ctx, tenant)
		},
		Access: d.RedriveAccess,
		Logger: d.log,
	})
	if err != nil {
		return err
	}
	d.console = c
	mux.Handle(console.Prefix, c.Handler())
	mux.Handle("GET /console", http.RedirectHandler(console.Prefix, http.StatusMovedPermanently))
	return nil
}

// ConsoleTenants lists the tenants as the console sees them (name and
// account), none when tenancy is off.
func (d *Daemon) ConsoleTenants(ctx context.Context) ([]console.TenantRef, error) {
	return tenantsAs(ctx, d, func(t tenancy.Tenant) console.TenantRef {
		return console.TenantRef{Name: t.Name, Account: t.Account}
	})
}
