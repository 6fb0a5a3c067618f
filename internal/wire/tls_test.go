package wire

import (
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/msgplatform/platform/internal/tlsconf"
	"github.com/msgplatform/platform/internal/tlsconf/tlstest"
)

// startTLSServer runs a nats-server whose client port requires TLS with
// c (and, with c.Verify, a client certificate).
func startTLSServer(t *testing.T, port int, c tlsconf.Config) *server.Server {
	t.Helper()
	tc, err := c.Server()
	if err != nil {
		t.Fatal(err)
	}
	return runServer(t, &server.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true,
		TLSConfig: tc, TLSVerify: c.Verify, TLSTimeout: 2})
}

func clientTLS(t *testing.T, c tlsconf.Config) *tls.Config {
	t.Helper()
	tc, err := c.Client("")
	if err != nil {
		t.Fatal(err)
	}
	return tc
}

// TestTLSForwardsAndReconnects: against a real nats-server requiring TLS
// (mTLS), wire upgrades after INFO, forwards headers, payload and reply
// through the TLS connection, and reconnects over TLS after a restart.
func TestTLSForwardsAndReconnects(t *testing.T) {
	ca := tlstest.NewT(t)
	srv := ca.VerifyingServerT(t, "n1")
	s := startTLSServer(t, -1, srv)
	c, reconnected := reconnectingForwarder(t, s.ClientURL(), clientTLS(t, ca.ClientT(t, "ingest")))
	check := func(s *server.Server, tag string) {
		t.Helper()
		nc, err := nats.Connect(s.ClientURL(), nats.Secure(clientTLS(t, ca.ClientT(t, "client"))))
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		_, err = nc.Subscribe("out.in.req", func(m *nats.Msg) {
			if m.Header.Get("X-Fwd") != "yes" || m.Header.Get("X-In") != "1" {
				t.Errorf("headers not forwarded: %v", m.Header)
			}
			_ = m.Respond(append([]byte("re:"), m.Data...))
		})
		if err != nil {
			t.Fatal(err)
		}
		_ = nc.Flush()
		waitFor(t, func() bool { return s.NumSubscriptions() >= 2 })
		req := nats.NewMsg("in.req")
		req.Header.Set("X-In", "1")
		req.Data = []byte(tag + strings.Repeat("x", 100<<10)) // spans many TLS records
		m, err := nc.RequestMsg(req, 5*time.Second)
		if err != nil || string(m.Data) != "re:"+string(req.Data) {
			t.Fatalf("%s: request through wire over TLS: %v", tag, err)
		}
	}
	check(s, "before")
	// Every connection is TLS (one still in its handshake, which connz
	// shows without a version or a name yet, is waited for).
	waitFor(t, func() bool {
		for _, cz := range connz(t, s) {
			if cz.TLSVersion == "" {
				t.Logf("connection %q (%s) shows no TLS version yet", cz.Name, cz.IP)
				return false
			}
		}
		return true
	})
	port := s.Addr().(*net.TCPAddr).Port
	s.Shutdown()
	s.WaitForShutdown()
	waitFor(t, func() bool { return !c.Connected() })
	s2 := startTLSServer(t, port, srv)
	defer s2.Shutdown()
	waitFor(t, func() bool { return c.Connected() && reconnected.Load() == 1 })
	check(s2, "after")
}

func connz(t *testing.T, s *server.Server) []*server.ConnInfo {
	t.Helper()
	cz, err := s.Connz(&server.ConnzOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cz.Conns
}

// TestTLSRefusals: wire never talks plaintext to a TLS port, never
// downgrades to a plaintext port when TLS is configured, refuses a server
// of another CA, and a port with verify refuses wire without a
// certificate.
func TestTLSRefusals(t *testing.T) {
	ca := tlstest.NewT(t)
	s := startTLSServer(t, -1, ca.VerifyingServerT(t, "n1"))
	defer s.Shutdown()
	plain := startServer(t, -1)
	defer plain.Shutdown()
	cases := []struct {
		name, url string
		tc        *tls.Config
		want      string
	}{
		{"no TLS to a TLS port", strings.Replace(s.ClientURL(), "tls://", "nats://", 1), nil, "requires TLS"},
		{"TLS to a plaintext port", plain.ClientURL(), clientTLS(t, ca.Trust()), "does not require it"},
		{"server of another CA", s.ClientURL(), clientTLS(t, tlstest.NewT(t).ClientT(t, "x")), "certificate"},
		{"no client certificate", s.ClientURL(), clientTLS(t, ca.Trust()), ""},
	}
	for _, tc := range cases {
		c, err := Dial(Options{URLs: []string{tc.url}, TLS: tc.tc, Timeout: 2 * time.Second})
		if err == nil {
			c.Close()
			t.Fatalf("%s: connected", tc.name)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
		t.Logf("%s: %v", tc.name, err)
	}
	// A refused connection is counted while its handshake fails; none
	// stays.
	waitFor(t, func() bool { return s.NumClients() == 0 })
}
