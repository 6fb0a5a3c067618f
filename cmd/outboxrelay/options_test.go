package main

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/msgplatform/platform/internal/cli"
)

// TestOptionsRefuseBadInput: bad flags are refused as usage errors (exit
// code 2) naming what was wrong.
func TestOptionsRefuseBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "exactly one of --dsn"},
		{[]string{"--dsn", "postgres://x", "--pebble", "/tmp/x"}, "exactly one of --dsn"},
		{[]string{"--dsn", "postgres://x", "--schema", "Bad-Schema"}, "--schema"},
		{[]string{"--dsn", "postgres://x", "--topic-map", "a=b,c"}, "--topic-map"},
		{[]string{"--dsn", "postgres://x", "--name", "bad name"}, "name"},
		{[]string{"--dsn", "postgres://x", "--lease-ttl", "10ms"}, "lease_ttl"},
		{[]string{"--dsn", "postgres://x", "extra"}, "unexpected arguments"},
	} {
		_, err := parseOptions(tc.args, io.Discard)
		var uerr cli.UsageError
		if !errors.As(err, &uerr) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want a usage error mentioning %q", tc.args, err, tc.want)
		}
		if exitCode(err, io.Discard) != 2 {
			t.Errorf("%q: exit code %d, want 2", tc.args, exitCode(err, io.Discard))
		}
	}
	o, err := parseOptions([]string{"--dsn", "postgres://x", "--schema", "billing_outbox", "--topic-map", "orders=orders-v2"}, io.Discard)
	if err != nil || o.schema != "billing_outbox" || o.cfg.TopicMap["orders"] != "orders-v2" {
		t.Fatalf("good flags: %+v, %v", o, err)
	}
}
