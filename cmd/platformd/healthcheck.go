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
// a FROM-scratch image, which has no shell or curl.
func runHealthcheck(args []string) int {
	fs := pflag.NewFlagSet("platformd healthcheck", pflag.ContinueOnError)
	url := fs.String("url", "http://127.0.0.1:8080/readyz", "readiness URL")
	timeout := fs.Duration("timeout", 3*time.Second, "request timeout")
	var tc tlsconf.Config
	fs.StringVar(&tc.CAFile, "ca", "", "https: the CA (PEM) that signs the listener's certificate (http.tls)")
	fs.StringVar(&tc.CertFile, "cert", "", "https: a client certificate (PEM), for http.tls.verify")
	fs.StringVar(&tc.KeyFile, "key", "", "https: the client certificate's key (PEM)")
	serverName := fs.String("server-name", "", "https: the name the listener's certificate must carry (default: the URL's host)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	c := &http.Client{Timeout: *timeout}
	if tc.Enabled() {
		cfg, err := tc.Client(*serverName)
		if err != nil {
			fmt.Fprintln(os.Stderr, "platformd healthcheck:", err)
			return exitUsage
		}
		c.Transport = &http.Transport{TLSClientConfig: cfg}
	}
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
