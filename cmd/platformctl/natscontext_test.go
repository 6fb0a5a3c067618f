package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/msgplatform/platform/conf"
	"github.com/msgplatform/platform/internal/attack"
	"github.com/msgplatform/platform/internal/daemon/daemontest"
	"github.com/msgplatform/platform/internal/tlsconf/tlstest"
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

// A context saved with the CA (and a client certificate) lets the real
// nats CLI through a TLS client port, one that verifies clients included.
// Without the CA, or with another CA's, the CLI is refused at the
// handshake.
func TestAttackNatsContextWithoutCA(t *testing.T) {
	nats := natsBin(t)
	ca := tlstest.NewT(t)
	srv := ca.VerifyingServerT(t, "n1")
	url := tlstest.RunNATS(t, srv)
	creds := adminCreds(t)
	xdg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", xdg)
	cl := ca.ClientT(t, "checkout")
	other := tlstest.NewT(t)
	rogue := other.ClientT(t, "rogue")
	save := func(name string, c natsContext) {
		t.Helper()
		p, err := natsContextPath(name, false)
		if err != nil {
			t.Fatal(err)
		}
		c.URL, c.Creds = url, creds
		if err := writeNatsContext(p, c); err != nil {
			t.Fatal(err)
		}
	}
	run := func(name string) ([]byte, error) {
		cmd := exec.Command(nats, "--context", name, "--timeout", "3s", "pub", "orders.order:1", "hello")
		cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+xdg)
		return cmd.CombinedOutput()
	}
	watch := globalOptions{server: url, creds: creds, tlsCA: ca.CAFile, tlsCert: cl.CertFile, tlsKey: cl.KeyFile}
	wc, err := watch.connect()
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close()
	sub, err := wc.SubscribeSync("orders.>")
	if err != nil || wc.Flush() != nil {
		t.Fatal(err)
	}
	save("good", natsContext{CA: ca.CAFile, Cert: cl.CertFile, Key: cl.KeyFile})
	if b, err := run("good"); err != nil {
		t.Fatalf("nats --context good pub: %v\n%s", err, b)
	}
	save("no-ca", natsContext{Cert: cl.CertFile, Key: cl.KeyFile})
	save("wrong-ca", natsContext{CA: other.CAFile, Cert: rogue.CertFile, Key: rogue.KeyFile})
	save("no-cert", natsContext{CA: ca.CAFile})
	for _, name := range []string{"no-ca", "wrong-ca", "no-cert"} {
		if b, err := run(name); err == nil {
			t.Fatalf("nats --context %s pub: published through TLS without the trust\n%s", name, b)
		}
		attack.Refused(t, "nats_context_"+strings.ReplaceAll(name, "-", "_"))
	}
	// Only the trusted context's message arrived.
	if err := wc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := sub.Pending(); n != 1 {
		t.Fatalf("%d messages reached orders.>, want 1 (the trusted context's)", n)
	}
}

// Against a platform whose client port is TLS (fabric.tls), platformctl
// with --tls-ca creates the user, and the context user add saves carries
// the CA: the real nats CLI publishes as the user through the ingest.
// Without --tls-ca platformctl is refused before anything is created.
func TestCLIUserNatsContextTLS(t *testing.T) {
	nats := natsBin(t)
	ca := tlstest.NewT(t)
	cfg := conf.DefaultConfig()
	cfg.Mode = conf.ModeFabric
	cfg.Fabric.Nodes, cfg.Fabric.Port, cfg.Fabric.ClusterPort, cfg.Fabric.DataDir = 1, -1, -1, ""
	cfg.Fabric.LameDuck = 200 * time.Millisecond
	cfg.Fabric.Durability.Replicas = 1
	cfg.Fabric.TLS = ca.ServerT(t, "n1")
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.DataDir = t.TempDir()
	d := startDaemon(t, &cfg)
	cli := func(tlsCA string, args ...string) (string, error) {
		if tlsCA != "" {
			args = append([]string{"--tls-ca", tlsCA}, args...)
		}
		return runCLI(t, d, args...)
	}
	xdg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", xdg)
	if out, err := cli("", "tenant", "create", "acme"); err == nil {
		t.Fatalf("tenant create without --tls-ca against a TLS port succeeded:\n%s", out)
	}
	attack.Refused(t, "platformctl_no_ca_tenant_create")
	if out, err := cli(ca.CAFile, "tenant", "list"); err != nil || strings.Contains(out, "acme") {
		t.Fatalf("tenant list after the refused create: %v\n%s", err, out)
	}
	for _, args := range [][]string{
		{"tenant", "create", "acme"},
		{"tenant", "topic", "acme", "orders", "--partitions", "1", "--replicas", "1"},
		{"user", "add", "acme", "checkout", "--pub", "orders", "--out", filepath.Join(t.TempDir(), "checkout.creds"), "--nats-context", "acme-tls"},
	} {
		if out, err := cli(ca.CAFile, args...); err != nil {
			t.Fatalf("platformctl %v: %v\n%s", args, err, out)
		}
	}
	var c natsContext
	if b, err := os.ReadFile(filepath.Join(xdg, "nats", "context", "acme-tls.json")); err != nil || json.Unmarshal(b, &c) != nil || c.CA != ca.CAFile {
		t.Fatalf("context: %+v (%v), want ca %s", c, err, ca.CAFile)
	}
	cmd := exec.Command(nats, "--context", "acme-tls", "pub", "--jetstream", "orders.order:1", "hello")
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+xdg)
	if b, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(b), "Stored in Stream") {
		t.Fatalf("nats --context acme-tls pub --jetstream: %v\n%s", err, b)
	}
}
