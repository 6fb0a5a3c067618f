package tlstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/msgplatform/platform/internal/tlsconf"
)

// RunNATS starts a plain nats-server (no accounts, JetStream in
// t.TempDir()) on 127.0.0.1 whose client port serves TLS with srv (a
// listener Config, e.g. from Server; with Verify it asks for client
// certificates), stops it when t ends and returns its tls:// URL. It is
// for the client side of TLS: a platform node is started by
// embeddednats.
func RunNATS(t testing.TB, srv tlsconf.Config) string {
	t.Helper()
	tc, err := srv.Server()
	if err != nil {
		t.Fatalf("tlstest: %v", err)
	}
	opts := &server.Options{
		Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: t.TempDir(),
		TLS: tc != nil, TLSConfig: tc, TLSVerify: srv.Verify, TLSTimeout: 2,
	}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("tlstest: nats-server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		t.Fatal("tlstest: nats-server not ready in 10s")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s.ClientURL()
}
