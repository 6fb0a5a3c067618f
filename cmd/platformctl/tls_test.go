package main

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/msgplatform/platform/internal/attack"
	"github.com/msgplatform/platform/internal/cli"
	"github.com/msgplatform/platform/internal/tlsconf/tlstest"
)

// adminCreds writes a throw-away admin .creds file (the TLS tests' servers
// have no accounts: any signed user is let in once TLS holds).
func adminCreds(t *testing.T) string {
	t.Helper()
	return writeCreds(t, newTrust(t))
}

// platformctl reaches a TLS client port with --tls-ca (nats:// and
// tls:// URLs alike) and, where the port verifies clients, with
// --tls-cert/--tls-key too.
func TestConnectTLS(t *testing.T) {
	ca := tlstest.NewT(t)
	url := tlstest.RunNATS(t, ca.ServerT(t, "n1"))
	creds := adminCreds(t)
	host := strings.TrimPrefix(strings.TrimPrefix(url, "tls://"), "nats://")
	for _, u := range []string{"nats://" + host, "tls://" + host} {
		g := &globalOptions{server: u, creds: creds, tlsCA: ca.CAFile}
		nc, err := g.connect()
		if err != nil {
			t.Fatalf("connect %s --tls-ca: %v", u, err)
		}
		if !nc.TLSRequired() {
			t.Errorf("connection to %s is not TLS", u)
		}
		nc.Close()
	}

	srv := ca.VerifyingServerT(t, "n2")
	murl := tlstest.RunNATS(t, srv)
	cl := ca.ClientT(t, "operator")
	g := &globalOptions{server: murl, creds: creds, tlsCA: ca.CAFile, tlsCert: cl.CertFile, tlsKey: cl.KeyFile}
	nc, err := g.connect()
	if err != nil {
		t.Fatalf("connect with --tls-cert to a verifying port: %v", err)
	}
	nc.Close()
}

// The flags are read from PLATFORM_TLS_* too: a command run with only the
// environment gets past the handshake to the control API (which a bare
// nats-server does not serve: no responders).
func TestTLSFlagsFromEnv(t *testing.T) {
	ca := tlstest.NewT(t)
	url := tlstest.RunNATS(t, ca.ServerT(t, "n1"))
	t.Setenv("PLATFORM_TLS_CA", ca.CAFile)
	root := newRootCmd()
	root.SetOut(&bytes.Buffer{})
	root.SetArgs([]string{"--server", url, "--creds", adminCreds(t), "--timeout", "2s", "status"})
	err := root.Execute()
	if err == nil || strings.Contains(err.Error(), "connect to") {
		t.Fatalf("status with PLATFORM_TLS_CA: err = %v, want a control API error after connecting", err)
	}
}

// Bad TLS flags are refused before dialling, each named.
func TestTLSFlagsNameTheProblem(t *testing.T) {
	ca := tlstest.NewT(t)
	cl := ca.ClientT(t, "operator")
	cases := []struct {
		g    globalOptions
		want string
	}{
		{globalOptions{tlsCert: cl.CertFile}, "--tls-cert"},
		{globalOptions{tlsKey: cl.KeyFile}, "--tls-cert"},
		{globalOptions{tlsCA: filepath.Join(t.TempDir(), "nope.pem")}, "--tls-ca"},
		{globalOptions{tlsCA: cl.KeyFile}, "no PEM certificate"},
	}
	for _, c := range cases {
		_, err := c.g.natsOptions("t")
		var ue cli.UsageError
		if err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err = %v, want a usage error naming %s", c.g, err, c.want)
		}
	}
}

// An attacker's platformctl (or anyone's) without the CA, with another
// CA's trust, or without a client certificate where the port verifies,
// is refused at the handshake; the server keeps no client.
func TestAttackPlatformctlWithoutTrust(t *testing.T) {
	ca := tlstest.NewT(t)
	srv := ca.ServerT(t, "n1")
	url := tlstest.RunNATS(t, srv)
	srv.Verify = true
	murl := tlstest.RunNATS(t, srv)
	creds := adminCreds(t)
	host := strings.TrimPrefix(url, "tls://")
	other := tlstest.NewT(t)
	rogue := other.ClientT(t, "rogue")
	attempts := []struct {
		name string
		g    globalOptions
	}{
		{"plaintext", globalOptions{server: "nats://" + host}},
		{"system_roots", globalOptions{server: url}},
		{"wrong_ca", globalOptions{server: url, tlsCA: other.CAFile}},
		{"no_client_cert", globalOptions{server: murl, tlsCA: ca.CAFile}},
		{"rogue_client_cert", globalOptions{server: murl, tlsCA: ca.CAFile, tlsCert: rogue.CertFile, tlsKey: rogue.KeyFile}},
	}
	for _, a := range attempts {
		a.g.creds = creds
		if nc, err := a.g.connect(); err == nil {
			nc.Close()
			t.Fatalf("%s: connected", a.name)
		}
		attack.Refused(t, "platformctl_"+a.name)
	}
	// The CA's own client still gets in: the refusals were the TLS.
	good := globalOptions{server: murl, creds: creds, tlsCA: ca.CAFile}
	cl := ca.ClientT(t, "ok")
	good.tlsCert, good.tlsKey = cl.CertFile, cl.KeyFile
	nc, err := good.connect()
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()
}
