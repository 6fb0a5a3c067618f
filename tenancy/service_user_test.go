package tenancy_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/tenancy"
)

// A platform service user of a tenant's account is signed by the
// tenant's account signing key, named and tagged as the platform's, works
// inside the account (reads its streams), is not one of the tenant's
// users, and is refused with a clear error for a malformed name, an
// unknown tenant and a suspended one (whose suspension also cuts the
// service connections already open); after Resume it connects again.
func TestServiceUserOfTenantAccount(t *testing.T) {
	e := start(t, 1)
	c := ctx(t)
	if _, err := e.m.Create(c, "test", tenancy.DefaultSpec("acme")); err != nil {
		t.Fatal(err)
	}
	orders := platform.DefaultTopicSpec("orders")
	orders.Replicas = 1
	if _, err := e.m.ApplyTopic(c, "test", "acme", orders, catalog.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	ten, err := e.m.Get(c, "acme")
	if err != nil {
		t.Fatal(err)
	}

	token, seed, err := e.m.ServiceUserCreds(c, "acme", "canary")
	if err != nil {
		t.Fatal(err)
	}
	uc, err := jwt.DecodeUserClaims(token)
	if err != nil {
		t.Fatal(err)
	}
	if uc.Name != "platform-svc:canary" || uc.Issuer != ten.SigningKey || uc.IssuerAccount != ten.Account {
		t.Errorf("service user: name %q issuer %s account %s; want platform-svc:canary signed by %s of %s", uc.Name, uc.Issuer, uc.IssuerAccount, ten.SigningKey, ten.Account)
	}
	if !uc.Tags.Contains(tenancy.ServiceUserTag) || !uc.Tags.Contains("tenant:acme") || !tenancy.IsServiceUser(uc.Name) {
		t.Errorf("service user tags %v, want %s and tenant:acme", uc.Tags, tenancy.ServiceUserTag)
	}
	_, js := natstest.Connect(t, e.f.ClientURLs(), nats.UserJWTAndSeed(token, string(seed)))
	if _, err := js.Stream(c, tenancy.StreamName("orders")); err != nil {
		t.Errorf("service user cannot read the tenant's topic: %v", err)
	}

	svc, err := e.m.ConnectTenant(c, "acme", "redrive", nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	users, err := e.m.ListUsers(c, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(users, func(u tenancy.User) bool { return tenancy.IsServiceUser(u.Name) }); i >= 0 {
		t.Errorf("a service user is listed among the tenant's users: %+v", users[i])
	}
	if tjs, err := e.m.TenantJetStream("acme"); err != nil {
		t.Errorf("TenantJetStream: %v", err)
	} else if _, err := tjs.AccountInfo(c); err != nil {
		t.Errorf("TenantJetStream account info: %v", err)
	}

	for _, tc := range []struct {
		tenant, name string
		want         error
	}{
		{"acme", "Bad:Name", tenancy.ErrInvalid},
		{"acme", "", tenancy.ErrInvalid},
		{"nobody", "canary", tenancy.ErrNotFound},
	} {
		if _, _, err := e.m.ServiceUserCreds(c, tc.tenant, tc.name); !errors.Is(err, tc.want) {
			t.Errorf("ServiceUserCreds(%q, %q) = %v, want %v", tc.tenant, tc.name, err, tc.want)
		}
	}
	if _, err := e.m.TenantJetStream("nobody"); !errors.Is(err, tenancy.ErrNotFound) {
		t.Errorf("TenantJetStream(nobody) = %v, want ErrNotFound", err)
	}

	if _, err := e.m.Suspend(c, "test", "acme"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.m.ConnectTenant(c, "acme", "redrive"); !errors.Is(err, tenancy.ErrConflict) {
		t.Errorf("ConnectTenant of a suspended tenant = %v, want ErrConflict", err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if svc.IsConnected() {
			return errors.New("the service connection survives the suspension")
		}
		return nil
	})
	// The service connection keeps reconnecting (every 100 ms) and is
	// refused while the tenant is suspended: the platform's own
	// refusals are not the tenant's authorization denials.
	time.Sleep(time.Second)
	if _, err := e.m.Resume(c, "test", "acme"); err != nil {
		t.Fatal(err)
	}
	again, err := e.m.ConnectTenant(c, "acme", "redrive")
	if err != nil {
		t.Fatalf("ConnectTenant after Resume: %v", err)
	}
	again.Close()
	time.Sleep(500 * time.Millisecond) // audit records are written asynchronously
	recs, err := e.m.Audit(c, tenancy.AuditFilter{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Action == tenancy.ActionAuthDenied {
			t.Errorf("the platform's refused service connection is audited as the tenant's denial: %+v", r)
		}
	}
	if us, err := e.m.Usage(c, "acme"); err != nil || len(us) != 1 || us[0].Denied != 0 {
		t.Errorf("usage %+v, %v: want 0 authorization denials (the tenant's users made no attempt)", us, err)
	}
}
