package main

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/msgplatform/platform/internal/attack"
	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/daemon/daemontest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/redrive"
	"github.com/msgplatform/platform/redrive/redrivetest"
	"github.com/msgplatform/platform/tenancy"
)

// platformctl dlq|redrive --user-creds of a publish-only tenant user show
// nothing of a DLQ it cannot consume and file nothing; the same commands
// with a user who may consume and publish payments work.
func TestAttackCLIDLQ(t *testing.T) {
	d := daemontest.Start(t, 1)
	mustCLI(t, d, "tenant", "create", "harbor")
	mustCLI(t, d, "tenant", "topic", "harbor", "payments", "--replicas", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	js := d.TenantJetStream(t, ctx, "harbor", "test")
	const card = "4111111111111111"
	redrivetest.DeadLetter(t, js, tenancy.StoredName("payments"), "ledger", 0, 3, "card "+card+" declined (%d)")
	pat := filepath.Join(t.TempDir(), "pat.creds")
	mustCLI(t, d, "user", "add", "harbor", "pat", "--pub", "payments", "--out", pat)
	alice := filepath.Join(t.TempDir(), "alice.creds")
	mustCLI(t, d, "user", "add", "harbor", "alice", "--pub", "payments", "--sub", "payments", "--out", alice)

	if out := mustCLI(t, d, "dlq", "list", "--tenant", "harbor", "--user-creds", pat); strings.Contains(out, "payments") {
		t.Errorf("pat's dlq list shows payments:\n%s", out)
	}
	for _, args := range [][]string{
		{"dlq", "show", "payments", "--tenant", "harbor", "--user-creds", pat},
		{"dlq", "show", "payments", "1", "--tenant", "harbor", "--user-creds", pat},
		{"dlq", "groups", "payments", "--tenant", "harbor", "--user-creds", pat},
		{"redrive", "request", "payments", "--tenant", "harbor", "--all", "--reason", "x", "--user-creds", pat},
		{"redrive", "request", "payments", "--tenant", "harbor", "--all", "--reason", "x", "--dry-run", "--user-creds", pat},
	} {
		out, err := runCLI(t, d, args...)
		if !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), "may not see the DLQ of payments") {
			t.Errorf("%s: %v, want a refusal saying why", strings.Join(args, " "), err)
		}
		if strings.Contains(out, card) || (err != nil && strings.Contains(err.Error(), card)) {
			t.Errorf("%s leaks an entry:\n%s", strings.Join(args, " "), out)
		}
	}
	svc, err := d.RedriveFor(ctx, "harbor")
	if err != nil {
		t.Fatal(err)
	}
	if l, err := svc.List(ctx, redrive.ListFilter{}); err != nil || len(l) != 0 {
		t.Fatalf("harbor's requests after the refusals: %d, %v; want none", len(l), err)
	}
	if out := mustCLI(t, d, "dlq", "show", "payments", "1", "--tenant", "harbor", "--user-creds", alice); !strings.Contains(out, card) {
		t.Fatalf("alice (--sub payments) cannot see her DLQ:\n%s", out)
	}
	attack.Refused(t, "cli_dlq")
}

// Tenant roles granted with platformctl user role: a viewer sees every
// DLQ but files and approves nothing; an approver approves; an operator
// files and runs redrives into the tenant's topics at most at the quota.
// A tenant user cannot grant roles, an unknown role is refused, and every
// change is audited.
func TestAttackCLIRoles(t *testing.T) {
	d := daemontest.Start(t, 1)
	mustCLI(t, d, "tenant", "create", "harbor", "--publish-rate", "50")
	mustCLI(t, d, "tenant", "topic", "harbor", "refunds", "--replicas", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	spec := platform.DefaultTopicSpec("payments")
	spec.Replicas, spec.Review = 1, platform.ReviewRequired
	if _, err := d.Tenants().ApplyTopic(ctx, "test", "harbor", spec, catalog.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	js := d.TenantJetStream(t, ctx, "harbor", "test")
	const card = "4111111111111111"
	redrivetest.DeadLetter(t, js, tenancy.StoredName("payments"), "ledger", 0, 3, "card "+card+" declined (%d)")
	creds := map[string]string{}
	for _, u := range []string{"vic", "ann", "oli"} {
		creds[u] = filepath.Join(t.TempDir(), u+".creds")
		mustCLI(t, d, "user", "add", "harbor", u, "--pub", "refunds", "--out", creds[u])
	}
	svc, err := d.RedriveFor(ctx, "harbor")
	if err != nil {
		t.Fatal(err)
	}
	count := func() int {
		l, err := svc.List(ctx, redrive.ListFilter{})
		if err != nil {
			t.Fatal(err)
		}
		return len(l)
	}

	// Refused grants change nothing.
	if _, err := runCLI(t, d, "user", "role", "harbor", "vic", "--add", "admin"); err == nil || !strings.Contains(err.Error(), `unknown role "admin"`) {
		t.Fatalf("unknown role: %v", err)
	}
	if _, err := runCLI(t, d, "user", "role", "harbor", "vic", "--add", "operator", "--user-creds", creds["ann"]); !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), "only a platform operator grants tenant roles") {
		t.Fatalf("a tenant user granting a role: %v", err)
	}
	if out := mustCLI(t, d, "user", "list", "harbor"); strings.Contains(out, "operator") {
		t.Fatalf("a refused grant changed the roles:\n%s", out)
	}
	// Without a role: nothing (--pub refunds only).
	if _, err := runCLI(t, d, "dlq", "show", "payments", "1", "--tenant", "harbor", "--user-creds", creds["vic"]); !errors.Is(err, control.ErrConflict) {
		t.Fatalf("vic without a role: %v", err)
	}

	if out := mustCLI(t, d, "user", "role", "harbor", "vic", "--add", "viewer"); !strings.Contains(out, "roles viewer") {
		t.Fatalf("grant viewer:\n%s", out)
	}
	mustCLI(t, d, "user", "role", "harbor", "ann", "--add", "approver")
	mustCLI(t, d, "user", "role", "harbor", "oli", "--add", "operator")
	if out := mustCLI(t, d, "dlq", "show", "payments", "1", "--tenant", "harbor", "--user-creds", creds["vic"]); !strings.Contains(out, card) {
		t.Fatalf("a viewer cannot see the DLQ:\n%s", out)
	}
	before := count()
	if _, err := runCLI(t, d, "redrive", "request", "payments", "--tenant", "harbor", "--all", "--reason", "x", "--user-creds", creds["vic"]); !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), "operator role") {
		t.Fatalf("a viewer filing a redrive: %v", err)
	}
	if _, err := runCLI(t, d, "redrive", "request", "payments", "--tenant", "harbor", "--all", "--reason", "x", "--rate", "500", "--user-creds", creds["oli"]); !errors.Is(err, control.ErrInvalid) || !strings.Contains(err.Error(), "quota of 50 events/s") {
		t.Fatalf("an operator above the quota: %v", err)
	}
	if n := count(); n != before {
		t.Fatalf("refused requests filed %d", n-before)
	}
	out := mustCLI(t, d, "redrive", "request", "payments", "--tenant", "harbor", "--all", "--reason", "fixed", "--sample", "0", "--rate", "0", "--user-creds", creds["oli"])
	id := requestedID(t, out, 3)
	st, err := svc.Get(ctx, id)
	if err != nil || st.Request.Rate != 50 || st.Requester != "oli@harbor" {
		t.Fatalf("oli's request: rate %g, requester %s, %v; want the quota, oli@harbor", st.Request.Rate, st.Requester, err)
	}
	for _, who := range []string{"vic", "oli"} {
		if _, err := runCLI(t, d, "redrive", "approve", id, "--tenant", "harbor", "--user-creds", creds[who]); !errors.Is(err, control.ErrConflict) {
			t.Fatalf("%s approving: %v, want a refusal", who, err)
		}
	}
	if _, err := runCLI(t, d, "redrive", "run", id, "--tenant", "harbor", "--user-creds", creds["ann"]); !errors.Is(err, control.ErrConflict) {
		t.Fatalf("an approver running: %v, want a refusal", err)
	}
	if st, _ := svc.Get(ctx, id); st.State != redrive.StateRequested {
		t.Fatalf("after the refusals: %s", st.State)
	}
	approveAndRun(t, d, id, creds["ann"], creds["oli"], 3, "--tenant", "harbor")

	mustCLI(t, d, "user", "role", "harbor", "vic", "--remove", "viewer")
	if _, err := runCLI(t, d, "dlq", "show", "payments", "1", "--tenant", "harbor", "--user-creds", creds["vic"]); !errors.Is(err, control.ErrConflict) {
		t.Fatalf("vic after the viewer role was removed: %v", err)
	}
	audit := mustCLI(t, d, "audit", "--tenant", "harbor")
	if n := strings.Count(audit, "user.role"); n != 4 {
		t.Fatalf("audit holds %d user.role records, want 4 (3 grants, 1 removal):\n%s", n, audit)
	}
	attack.Refused(t, "cli_roles")
}
