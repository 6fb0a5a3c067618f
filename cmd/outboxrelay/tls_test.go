package main

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/attack"
	"github.com/msgplatform/platform/internal/cli"
	"github.com/msgplatform/platform/internal/tlsconf"
	"github.com/msgplatform/platform/internal/tlsconf/tlstest"
	"github.com/msgplatform/platform/outboxrelay"
	"github.com/msgplatform/platform/outboxrelay/pebbleoutbox"
	"github.com/msgplatform/platform/platform"
)

// pebbleOutbox makes a Pebble outbox in a new directory holding n events
// of topic orders and returns the directory.
func pebbleOutbox(t *testing.T, n int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "outbox")
	db, err := pebble.Open(dir, &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	store, err := pebbleoutbox.Open(db, pebbleoutbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := store.Update(func(b *pebble.Batch) error {
			return store.Enqueue(b, outboxrelay.Event{ID: "ev-" + string(rune('a'+i)), Topic: "orders", Key: "order:1", Payload: []byte("x")})
		}); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// tlsJetStream connects to url with c and makes the orders stream and an
// R1 lease bucket (the bare test server has one node).
func tlsJetStream(t *testing.T, url string, c tlsconf.Config) jetstream.JetStream {
	t.Helper()
	tc, err := c.Client("")
	if err != nil {
		t.Fatal(err)
	}
	_, js := natstest.Connect(t, url, nats.Secure(tc))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: platform.StreamName("orders"), Subjects: []string{platform.TopicSubject("orders", ">")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: outboxrelay.DefaultConfig("x").LeaseBucket}); err != nil {
		t.Fatal(err)
	}
	return js
}

func streamMsgs(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, platform.StreamName("orders"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// The relay publishes through a TLS client port that verifies client
// certificates, given --tls-ca, --tls-cert and --tls-key.
func TestRelayOverTLS(t *testing.T) {
	ca := tlstest.NewT(t)
	srv := ca.VerifyingServerT(t, "n1")
	url := tlstest.RunNATS(t, srv)
	cl := ca.ClientT(t, "relay")
	js := tlsJetStream(t, url, cl)
	dir := pebbleOutbox(t, 3)
	o, err := parseOptions([]string{"--pebble", dir, "--nats", url, "--http", "", "--lease-ttl", "1s",
		"--tls-ca", cl.CAFile, "--tls-cert", cl.CertFile, "--tls-key", cl.KeyFile}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relay(ctx, o, io.Discard) }()
	deadline := time.Now().Add(20 * time.Second)
	for streamMsgs(t, js) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("relay over TLS stored %d of 3 events in 20s", streamMsgs(t, js))
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("relay: %v", err)
	}
}

// A relay without the CA, with another CA, or without a client
// certificate is refused at the handshake and stops at once with an error
// naming the flag to fix (no retry loop); the stream is unchanged.
func TestAttackRelayWithoutTrust(t *testing.T) {
	ca := tlstest.NewT(t)
	srv := ca.VerifyingServerT(t, "n1")
	url := tlstest.RunNATS(t, srv)
	js := tlsJetStream(t, url, ca.ClientT(t, "admin"))
	other := tlstest.NewT(t)
	rogue := other.ClientT(t, "rogue")
	host := strings.TrimPrefix(url, "tls://")
	for _, a := range []struct {
		name string
		args []string
		hint string
	}{
		{"plaintext", []string{"--nats", "nats://" + host}, "--tls-ca"},
		{"wrong_ca", []string{"--nats", url, "--tls-ca", other.CAFile, "--tls-cert", rogue.CertFile, "--tls-key", rogue.KeyFile}, "--tls-ca"},
		{"no_client_cert", []string{"--nats", url, "--tls-ca", ca.CAFile}, "--tls-cert"},
	} {
		o, err := parseOptions(append([]string{"--pebble", pebbleOutbox(t, 1), "--http", ""}, a.args...), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		err = relay(ctx, o, io.Discard)
		cancel()
		if err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), a.hint) {
			t.Fatalf("%s: relay returned %v, want a TLS refusal naming %q at once", a.name, err, a.hint)
		}
		if n := streamMsgs(t, js); n != 0 {
			t.Fatalf("%s: %d events reached the stream", a.name, n)
		}
		attack.Refused(t, "outboxrelay_"+a.name)
	}
}

// Bad TLS flags are usage errors naming the flag.
func TestOptionsRefuseBadTLS(t *testing.T) {
	ca := tlstest.NewT(t)
	cl := ca.ClientT(t, "relay")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-cert", cl.CertFile}, "--tls-cert"},
		{[]string{"--tls-ca", filepath.Join(t.TempDir(), "nope.pem")}, "--tls-ca"},
		{[]string{"--tls-ca", cl.KeyFile}, "no PEM certificate"},
	} {
		_, err := parseOptions(append([]string{"--dsn", "postgres://x"}, c.args...), io.Discard)
		var uerr cli.UsageError
		if !errors.As(err, &uerr) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want a usage error naming %q", c.args, err, c.want)
		}
	}
}

// PLATFORM_TLS_CA, _CERT and _KEY are the flags' defaults.
func TestOptionsTLSFromEnv(t *testing.T) {
	ca := tlstest.NewT(t)
	cl := ca.ClientT(t, "relay")
	t.Setenv("PLATFORM_TLS_CA", cl.CAFile)
	t.Setenv("PLATFORM_TLS_CERT", cl.CertFile)
	t.Setenv("PLATFORM_TLS_KEY", cl.KeyFile)
	o, err := parseOptions([]string{"--dsn", "postgres://x"}, io.Discard)
	if err != nil || o.tls != cl {
		t.Fatalf("options %+v, %v; want tls %+v", o.tls, err, cl)
	}
}
