package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/msgplatform/platform/internal/daemon/daemontest"
)

// The example end to end against a real platformd (3 nodes, the scaled
// down HarborCart catalog): every check holds.
func TestHarborCartEndToEnd(t *testing.T) {
	d := daemontest.Start(t, 3)
	cfg := DefaultConfig()
	cfg.Server, cfg.Creds = d.URL(), d.Creds()
	cfg.Lease = 2 * time.Second
	cfg.Timeout = 60 * time.Second
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	err := Run(ctx, cfg, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"crashed without acking", "lease", "orders DLQ", "class decode", "duplicate=true", "FLAGGED"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}
