package main

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/daemon/daemontest"
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
	nc, err := d.ConnectTenant(ctx, "harbor", "test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
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
	t.Logf("attack.cli_dlq: refused")
}
