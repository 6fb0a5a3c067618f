package tlsconf_test

import (
	"crypto/tls"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/msgplatform/platform/internal/tlsconf"
	"github.com/msgplatform/platform/internal/tlsconf/tlstest"
	"github.com/msgplatform/platform/internal/validate"
)

// serveHi listens with st on a free loopback port until the test ends,
// writes "hi" to every connection and closes it; it returns the address.
func serveHi(t *testing.T, st *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = c.Write([]byte("hi"))
			}()
		}
	}()
	return ln.Addr().String()
}

// readHi dials addr with tc and reads what it serves until it closes.
func readHi(addr string, tc *tls.Config) error {
	conn, err := tls.Dial("tcp", addr, tc)
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = io.ReadAll(conn)
	return err
}

// A client with the CA reaches a listener; one with another CA, or
// without a certificate where Verify asks for one, is refused.
func TestMutualTLS(t *testing.T) {
	ca := tlstest.NewT(t)
	st, err := ca.VerifyingServerT(t, "n1").Server()
	if err != nil {
		t.Fatal(err)
	}
	addr := serveHi(t, st)
	dial := func(c tlsconf.Config) error {
		ct, err := c.Client("")
		if err != nil {
			return err
		}
		return readHi(addr, ct)
	}
	if err := dial(ca.ClientT(t, "svc")); err != nil {
		t.Fatalf("client with a certificate of the CA: %v", err)
	}
	if err := dial(ca.Trust()); err == nil {
		t.Fatal("client without a certificate was served by a listener with verify")
	}
	other := tlstest.NewT(t)
	if err := dial(other.ClientT(t, "rogue")); err == nil {
		t.Fatal("client of another CA was served")
	}
}

func TestValidateNamesEveryProblem(t *testing.T) {
	var p validate.Problems
	tlsconf.Config{CertFile: "/nonexistent/cert.pem", Verify: true}.ValidateServer(&p, "node.tls")
	msg := p.Err(tlsconf.ErrInvalid).Error()
	for _, want := range []string{"node.tls.key_file", "node.tls.ca_file", "node.tls.cert_file"} {
		if !strings.Contains(msg, want) {
			t.Errorf("problems %q do not name %s", msg, want)
		}
	}
	ca := tlstest.NewT(t)
	c := ca.ClientT(t, "svc")
	if fi, err := os.Stat(c.KeyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode: %v %v", fi.Mode(), err)
	}
	var q validate.Problems
	c.ValidateClient(&q, "tls")
	if q.Len() != 0 {
		t.Fatalf("a good client config has problems: %v", q.Err(tlsconf.ErrInvalid))
	}
}

// Internal accepts a listener certificate of the CA whatever names it
// carries (the platform dials 0.0.0.0 or a container address), presents
// the listener's own certificate (so Verify admits it), and refuses a
// server of another CA; without ca_file it accepts only the listener's
// own certificate or one the system pool verifies for the host.
func TestInternal(t *testing.T) {
	ca := tlstest.NewT(t)
	srv := ca.VerifyingServerT(t, "n1", "n1.example.internal")
	own, err := srv.Internal()
	if err != nil {
		t.Fatal(err)
	}
	serve := func(c tlsconf.Config) string {
		st, err := c.Server()
		if err != nil {
			t.Fatal(err)
		}
		return serveHi(t, st)
	}
	dial := func(addr, name string, tc *tls.Config) error {
		tc = tc.Clone()
		tc.ServerName = name
		return readHi(addr, tc)
	}
	addr := serve(srv)
	// Dialled by a name the certificate does not carry.
	if err := dial(addr, "0.0.0.0", own); err != nil {
		t.Fatalf("own listener by another name: %v", err)
	}
	if err := dial(serve(tlstest.NewT(t).ServerT(t, "rogue")), "127.0.0.1", own); err == nil {
		t.Fatal("a listener of another CA was accepted")
	}
	noCA := srv
	noCA.CAFile, noCA.Verify = "", false
	self, err := noCA.Internal()
	if err != nil {
		t.Fatal(err)
	}
	if err := dial(serve(noCA), "0.0.0.0", self); err != nil {
		t.Fatalf("without ca_file, the listener's own certificate: %v", err)
	}
	if err := dial(serve(ca.ServerT(t, "n2")), "127.0.0.1", self); err == nil {
		t.Fatal("without ca_file, another certificate was accepted without the system pool verifying it")
	}
}
