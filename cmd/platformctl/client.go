package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/msgplatform/platform/internal/cli"
	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/principal"
	"github.com/msgplatform/platform/internal/tlsconf"
)

// connect opens an admin connection to the platform with the configured
// credentials, naming what is missing when it cannot.
func (g *globalOptions) connect() (*nats.Conn, error) {
	creds := g.credsPath()
	if _, err := os.Stat(creds); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("no credentials at %s: start platformd first (it writes <data-dir>/creds/admin.creds), or pass --creds / set PLATFORM_CREDS", creds)
		}
		return nil, fmt.Errorf("credentials %s: %w", creds, err)
	}
	opts, err := g.natsOptions("platformctl")
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(g.server, append(opts, nats.UserCredentials(creds))...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s with %s: %w", g.server, creds, err)
	}
	return nc, nil
}

// natsOptions are the options of every connection platformctl opens:
// its name, a 5 s connect timeout and, with --tls-ca / --tls-cert /
// --tls-key, TLS verified against that CA (a tls:// URL without them
// still dials TLS, checked against the system roots).
func (g *globalOptions) natsOptions(name string) ([]nats.Option, error) {
	opts := []nats.Option{nats.Name(name), nats.Timeout(5 * time.Second)}
	tc, err := g.tlsClient()
	if err != nil {
		return nil, err
	}
	if tc != nil {
		opts = append(opts, nats.Secure(tc))
	}
	return opts, nil
}

// tlsClient is the TLS of --tls-ca, --tls-cert and --tls-key (nil when
// none is given), every problem named by its flag.
func (g *globalOptions) tlsClient() (*tls.Config, error) {
	tc, err := g.tls().FlagClient(tlsconf.Flags{CA: "--tls-ca", Cert: "--tls-cert", Key: "--tls-key"})
	if err != nil {
		return nil, cli.UsageError{Err: err}
	}
	return tc, nil
}

// tls is --tls-ca, --tls-cert and --tls-key as a client TLS setting.
func (g *globalOptions) tls() tlsconf.Config {
	return tlsconf.Config{CAFile: g.tlsCA, CertFile: g.tlsCert, KeyFile: g.tlsKey}
}

// requestTimeout parses --timeout.
func (g *globalOptions) requestTimeout() (time.Duration, error) {
	d, err := time.ParseDuration(g.timeout)
	if err != nil || d <= 0 {
		return 0, cli.UsageError{Err: fmt.Errorf("--timeout: want a positive duration such as 10s, got %q", g.timeout)}
	}
	return d, nil
}

// callLong is call for an operation the platform may work on for up to
// serverTimeout: unless --timeout was given to cmd, platformctl waits
// that long plus a margin for the reply.
func (g *globalOptions) callLong(cmd *cobra.Command, serverTimeout time.Duration) caller {
	return func(ctx context.Context, subject string, req, resp any) error {
		if f := cmd.Flags().Lookup("timeout"); f == nil || !f.Changed {
			return g.callWithin(ctx, serverTimeout+10*time.Second, subject, req, resp)
		}
		return g.call(ctx, subject, req, resp)
	}
}

// call connects, sends one control API request and decodes its reply,
// waiting --timeout for it.
func (g *globalOptions) call(ctx context.Context, subject string, req, resp any) error {
	d, err := g.requestTimeout()
	if err != nil {
		return err
	}
	return g.callWithin(ctx, d, subject, req, resp)
}

// callWithin is call waiting d for the reply.
func (g *globalOptions) callWithin(ctx context.Context, d time.Duration, subject string, req, resp any) error {
	nc, err := g.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return control.Call(ctx, nc, subject, req, resp)
}

// userCredsFlag binds --user-creds (default $PLATFORM_USER_CREDS): the
// .creds file whose user signs state-changing requests.
func userCredsFlag(f *pflag.FlagSet, p *string) {
	f.StringVar(p, "user-creds", os.Getenv("PLATFORM_USER_CREDS"),
		"your .creds file (from `platformctl user add`, or a platform user's): signs the request so platformd knows who you are (env PLATFORM_USER_CREDS)")
}

// signer loads the user's .creds (nil when none is given: the request
// goes unsigned).
func signer(path string) (*principal.Signer, error) {
	if path == "" {
		return nil, nil
	}
	s, err := principal.LoadSigner(path)
	if err != nil {
		return nil, cli.UsageError{Err: fmt.Errorf("--user-creds: %w", err)}
	}
	return s, nil
}

// callAs is call with the request signed by the user of the .creds file
// at userCreds (principal.Envelope); unsigned when userCreds is "".
func (g *globalOptions) callAs(ctx context.Context, userCreds, subject string, req, resp any) error {
	s, err := signer(userCreds)
	if err != nil || s == nil {
		if err != nil {
			return err
		}
		return g.call(ctx, subject, req, resp)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode request: %w", err)
	}
	env, err := s.Sign(control.SubjectPrefix+"."+subject, body, time.Now())
	if err != nil {
		return err
	}
	return g.call(ctx, subject, env, resp)
}
