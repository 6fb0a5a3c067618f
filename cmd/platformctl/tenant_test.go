package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/cli"
	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/daemon/daemontest"
	"github.com/msgplatform/platform/tenancy"
)

func TestCLITenants(t *testing.T) {
	d := daemontest.Start(t, 3)
	out := mustCLI(t, d, "tenant", "create", "harbor-retail", "--publish-rate", "5000", "--policy", "throttle", "--r3-disk", "20GiB")
	if !strings.Contains(out, `"publish_rate": 5000`) || !strings.Contains(out, `"state": "active"`) {
		t.Fatalf("create:\n%s", out)
	}
	mustCLI(t, d, "tenant", "topic", "harbor-retail", "orders", "--partitions", "2")
	mustCLI(t, d, "tenant", "group", "harbor-retail", "email-notifier", "--topic", "orders")
	creds := filepath.Join(t.TempDir(), "producer.creds")
	out = mustCLI(t, d, "user", "add", "harbor-retail", "producer", "--pub", "orders", "--out", creds)
	if !strings.Contains(out, "_INBOX_producer") {
		t.Fatalf("user add:\n%s", out)
	}
	if st, err := os.Stat(creds); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("creds file: %v %v", st, err)
	}
	nc, err := nats.Connect(d.URL(), nats.UserCredentials(creds), nats.CustomInboxPrefix(tenancy.InboxPrefix("producer")))
	if err != nil {
		t.Fatalf("connect with the written creds: %v", err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, "orders.k1", []byte("x")); err != nil {
		t.Fatalf("publish: %v", err)
	}

	out = mustCLI(t, d, "tenant", "update", "harbor-retail", "--publish-rate", "100", "--policy", "reject")
	if !strings.Contains(out, `"publish_rate": 100`) || !strings.Contains(out, `"disk": 21474836480`) {
		t.Fatalf("update lost other quota fields:\n%s", out)
	}
	if out = mustCLI(t, d, "tenant", "suspend", "harbor-retail"); !strings.Contains(out, "suspended") {
		t.Fatalf("suspend: %s", out)
	}
	if out = mustCLI(t, d, "tenant", "resume", "harbor-retail"); !strings.Contains(out, "active") {
		t.Fatalf("resume: %s", out)
	}
	if out = mustCLI(t, d, "tenant", "list"); !strings.Contains(out, "harbor-retail") || !strings.Contains(out, "100/s") {
		t.Fatalf("list:\n%s", out)
	}
	if out = mustCLI(t, d, "user", "list", "harbor-retail"); !strings.Contains(out, "producer") {
		t.Fatalf("user list:\n%s", out)
	}
	// user update: new permissions, same creds.
	if out = mustCLI(t, d, "user", "update", "harbor-retail", "producer", "--pub", "orders", "--sub", "orders"); !strings.Contains(out, "pub=orders sub=orders") {
		t.Fatalf("user update:\n%s", out)
	}
	if out = mustCLI(t, d, "user", "list", "harbor-retail"); !strings.Contains(out, "producer  orders  orders") {
		t.Fatalf("user list after update:\n%s", out)
	}
	if out = mustCLI(t, d, "usage", "harbor-retail"); !strings.Contains(out, "harbor-retail") {
		t.Fatalf("usage:\n%s", out)
	}
	// Sharing: grant, list, revoke.
	mustCLI(t, d, "tenant", "create", "meridian")
	if out = mustCLI(t, d, "tenant", "share", "orders", "--from", "harbor-retail", "--to", "meridian"); !strings.Contains(out, "shared.harbor-retail.orders.*") {
		t.Fatalf("share:\n%s", out)
	}
	if out = mustCLI(t, d, "tenant", "shares"); !strings.Contains(out, "harbor-retail  orders") || !strings.Contains(out, "meridian") {
		t.Fatalf("shares:\n%s", out)
	}
	mustCLI(t, d, "user", "add", "meridian", "reader", "--sub", "harbor-retail/orders", "--out", filepath.Join(t.TempDir(), "r.creds"))
	mustCLI(t, d, "tenant", "share", "orders", "--from", "harbor-retail", "--to", "meridian", "--revoke")
	if out = mustCLI(t, d, "tenant", "shares", "meridian"); strings.Count(out, "\n") != 1 {
		t.Fatalf("shares after revoke:\n%s", out)
	}
	if _, err := runCLI(t, d, "tenant", "share", "payments", "--from", "harbor-retail", "--to", "meridian"); !errors.Is(err, control.ErrNotFound) {
		t.Errorf("share of an unknown topic: %v", err)
	}

	out = mustCLI(t, d, "audit", "--tenant", "harbor-retail")
	wantContains(t, "audit", out, "tenant.create", "tenant.update", "tenant.suspend", "tenant.resume", "user.add", "user.update", "topic.apply", "share.grant", "share.revoke")

	// Bad input: clear errors, nothing changes.
	for _, c := range []struct {
		args []string
		kind error
	}{
		{[]string{"tenant", "show", "nobody"}, control.ErrNotFound},
		{[]string{"tenant", "update", "nobody", "--publish-rate", "5"}, control.ErrNotFound},
		{[]string{"user", "add", "nobody", "u", "--pub", "orders", "--out", filepath.Join(t.TempDir(), "u.creds")}, control.ErrNotFound},
		{[]string{"user", "add", "harbor-retail", "u", "--pub", "payments", "--out", filepath.Join(t.TempDir(), "u.creds")}, control.ErrNotFound},
		{[]string{"tenant", "delete", "harbor-retail"}, control.ErrConflict},
		{[]string{"user", "update", "harbor-retail", "ghost", "--pub", "orders"}, control.ErrNotFound},
		{[]string{"user", "update", "harbor-retail", "producer", "--pub", "payments"}, control.ErrNotFound},
		{[]string{"user", "update", "harbor-retail", "producer"}, nil},
		{[]string{"tenant", "create", "Bad_Name"}, nil},
		{[]string{"tenant", "create", "x", "--publish-rate", "-3"}, nil},
		{[]string{"tenant", "create", "x", "--r1-disk", "lots"}, nil},
		{[]string{"tenant", "create", "x", "--policy", "drop"}, nil},
		{[]string{"tenant", "share", "orders", "--from", "harbor-retail"}, nil},
		{[]string{"tenant", "update", "harbor-retail"}, nil},
	} {
		_, err := runCLI(t, d, c.args...)
		var ue cli.UsageError
		switch {
		case err == nil:
			t.Errorf("%v: no error", c.args)
		case c.kind == nil && !errors.As(err, &ue):
			t.Errorf("%v: %v, want a usage error", c.args, err)
		case c.kind != nil && !errors.Is(err, c.kind):
			t.Errorf("%v: %v, want %v", c.args, err, c.kind)
		}
	}
	if out = mustCLI(t, d, "tenant", "list"); strings.Count(out, "\n") != 3 {
		t.Fatalf("bad input created something:\n%s", out)
	}
}
