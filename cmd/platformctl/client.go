package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/msgplatform/platform/internal/control"
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
	nc, err := nats.Connect(g.server, nats.UserCredentials(creds), nats.Name("platformctl"), nats.Timeout(5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("connect to %s with %s: %w", g.server, creds, err)
	}
	return nc, nil
}

// requestTimeout parses --timeout.
func (g *globalOptions) requestTimeout() (time.Duration, error) {
	d, err := time.ParseDuration(g.timeout)
	if err != nil || d <= 0 {
		return 0, usageError{fmt.Errorf("--timeout: want a positive duration such as 10s, got %q", g.timeout)}
	}
	return d, nil
}

// call connects, sends one control API request and decodes its reply.
func (g *globalOptions) call(ctx context.Context, subject string, req, resp any) error {
	d, err := g.requestTimeout()
	if err != nil {
		return err
	}
	nc, err := g.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return control.Call(ctx, nc, subject, req, resp)
}
