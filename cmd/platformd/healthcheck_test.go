package main

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/msgplatform/platform/internal/tlsconf/tlstest"
)

// The health check probes an HTTPS listener (http.tls) with --ca, and
// fails without it.
func TestHealthcheckHTTPS(t *testing.T) {
	ca := tlstest.NewT(t)
	srv := ca.ServerT(t, "n1")
	tc, err := srv.Server()
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ready\n")) }))
	s.TLS = tc
	s.StartTLS()
	defer s.Close()
	if rc := runHealthcheck([]string{"--url", s.URL + "/readyz", "--ca", ca.CAFile}); rc != exitOK {
		t.Fatalf("with --ca: exit %d", rc)
	}
	if rc := runHealthcheck([]string{"--url", s.URL + "/readyz"}); rc != exitFailure {
		t.Fatalf("without --ca: exit %d, want %d", rc, exitFailure)
	}
}
