package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/msgplatform/platform/internal/daemon/daemontest"
	"github.com/msgplatform/platform/tenancy"
)

// user add --nats-context saves a context the real nats CLI uses as the
// user: a JetStream publish gets its ack on the user's inbox prefix with
// no other flag. A bad or taken context name is refused before the user
// is created.
func TestCLIUserNatsContext(t *testing.T) {
	nats := natsBin(t)
	d := daemontest.Start(t, 1)
	xdg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", xdg)
	mustCLI(t, d, "tenant", "create", "acme")
	mustCLI(t, d, "tenant", "topic", "acme", "orders", "--partitions", "2")
	creds := filepath.Join(t.TempDir(), "checkout.creds")
	out := mustCLI(t, d, "user", "add", "acme", "checkout", "--pub", "orders", "--out", creds, "--nats-context", "acme-checkout")
	path := filepath.Join(xdg, "nats", "context", "acme-checkout.json")
	if !strings.Contains(out, path) {
		t.Fatalf("user add did not say where the context is:\n%s", out)
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("context file: %v %v", st, err)
	}
	var c natsContext
	if b, err := os.ReadFile(path); err != nil || json.Unmarshal(b, &c) != nil {
		t.Fatalf("context file: %v\n%s", err, b)
	}
	if c.Creds != creds || c.InboxPrefix != tenancy.InboxPrefix("checkout") || c.URL != d.URL() {
		t.Fatalf("context %+v: want creds %s, inbox prefix %s, url %s", c, creds, tenancy.InboxPrefix("checkout"), d.URL())
	}
	cmd := exec.Command(nats, "--context", "acme-checkout", "pub", "--jetstream", "orders.order:1", "hello")
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+xdg)
	if b, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(b), "Stored in Stream") {
		t.Fatalf("nats --context acme-checkout pub --jetstream: %v\n%s", err, b)
	}

	for _, name := range []string{"acme-checkout", "../escape", ".hidden", "a b"} {
		if out, err := runCLI(t, d, "user", "add", "acme", "other", "--pub", "orders", "--out", filepath.Join(t.TempDir(), "o.creds"), "--nats-context", name); err == nil {
			t.Fatalf("--nats-context %q accepted:\n%s", name, out)
		} else if !strings.Contains(err.Error(), "--nats-context") {
			t.Errorf("--nats-context %q: the error does not name the flag: %v", name, err)
		}
	}
	if out := mustCLI(t, d, "user", "list", "acme"); strings.Contains(out, "other") {
		t.Fatalf("a refused user add created the user:\n%s", out)
	}
}
