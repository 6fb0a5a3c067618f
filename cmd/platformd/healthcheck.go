package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/spf13/pflag"

	"github.com/msgplatform/platform/internal/tlsconf"
)

// runHealthcheck probes platformd's /readyz: the container health check of
// a FROM-scratch image, which has no shell or curl. With --tls-ca (the CA
// of http.tls) it speaks HTTPS, the default URL becoming
// https://127.0.0.1:8080/readyz; --tls-cert and --tls-key present a client
// certificate to a listener with http.tls.verify.
func runHealthcheck(args []string) int {
	fs := pflag.NewFlagSet("platformd healthcheck", pflag.ContinueOnError)
	url := fs.String("url", "http://127.0.0.1:8080/readyz", "readiness URL (https://127.0.0.1:8080/readyz by default with --tls-ca)")
	timeout := fs.Duration("timeout", 3*time.Second, "request timeout")
	var tc tlsconf.Config
	fs.StringVar(&tc.CAFile, "tls-ca", "", "CA file (PEM) of the HTTP listener's certificate (http.tls): probe over HTTPS")
	fs.StringVar(&tc.CertFile, "tls-cert", "", "client certificate (PEM) for a listener with http.tls.verify, with --tls-key")
	fs.StringVar(&tc.KeyFile, "tls-key", "", "the --tls-cert's private key (PEM)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if tc.Enabled() && !fs.Changed("url") {
		*url = "https://127.0.0.1:8080/readyz"
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if (tc.CertFile == "") != (tc.KeyFile == "") {
		fmt.Fprintln(os.Stderr, "platformd healthcheck: --tls-cert and --tls-key go together")
		return exitUsage
	}
	ct, err := tc.Client("")
	if err != nil {
		fmt.Fprintln(os.Stderr, "platformd healthcheck: --tls-ca, --tls-cert, --tls-key:", err)
		return exitUsage
	}
	tr.TLSClientConfig = ct
	c := &http.Client{Timeout: *timeout, Transport: tr}
	resp, err := c.Get(*url)
	if err != nil {
		fmt.Fprintln(os.Stderr, "platformd healthcheck:", err)
		return exitFailure
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(os.Stderr, "platformd healthcheck: %s: %s", resp.Status, body)
		return exitFailure
	}
	return exitOK
}
