package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/msgplatform/platform/internal/tlsconf/tlstest"
)

// The health check speaks HTTPS to a listener with http.tls given its CA
// (and a client certificate where the listener verifies); plain HTTP,
// no CA or another CA's fail the check.
func TestHealthcheckHTTPS(t *testing.T) {
	ca := tlstest.NewT(t)
	srv := ca.VerifyingServerT(t, "n1")
	st, err := srv.Server()
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ready\n")) }))
	hs.TLS = st
	hs.StartTLS()
	defer hs.Close()
	url := hs.URL + "/readyz"
	cl := ca.ClientT(t, "probe")
	other := tlstest.NewT(t)
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"--url", url, "--tls-ca", ca.CAFile, "--tls-cert", cl.CertFile, "--tls-key", cl.KeyFile}, exitOK},
		{[]string{"--url", url, "--tls-ca", ca.CAFile}, exitFailure},
		{[]string{"--url", url}, exitFailure},
		{[]string{"--url", strings.Replace(url, "https://", "http://", 1), "--tls-ca", ca.CAFile}, exitFailure},
		{[]string{"--url", url, "--tls-ca", other.CAFile, "--tls-cert", cl.CertFile, "--tls-key", cl.KeyFile}, exitFailure},
		{[]string{"--url", url, "--tls-cert", cl.CertFile}, exitUsage},
	} {
		if got := runHealthcheck(c.args); got != c.want {
			t.Errorf("healthcheck %q = %d, want %d", c.args, got, c.want)
		}
	}
}
