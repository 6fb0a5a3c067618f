package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/daemon/daemontest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/region"
)

// TestCLIRegions runs region and residency commands against platformd in
// mode regions (eu home, us; one node each).
func TestCLIRegions(t *testing.T) {
	cfg := daemontest.RegionsConfig(t)
	cfg.HTTP.Listen = "off"
	eu, orders := platform.DefaultTopicSpec("orders.eu"), platform.DefaultTopicSpec("orders")
	eu.Replicas, eu.Residency = 1, "eu"
	orders.Replicas = 1
	jobs := platform.DefaultQueueSpec("jobs.us")
	jobs.Replicas, jobs.Residency = 1, "us"
	cfg.Catalog = platform.Catalog{Topics: map[string]platform.TopicSpec{"orders.eu": eu, "orders": orders},
		Queues: map[string]platform.QueueSpec{"jobs.us": jobs}}
	d := startDaemon(t, &cfg)

	out, err := runCLI(t, d, "region", "mirror", "orders.eu", "--to", "us")
	if !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), "topic orders.eu is resident in eu") {
		t.Fatalf("resident mirror: want a refusal naming eu, got %v\n%s", err, out)
	}
	if out, err = runCLI(t, d, "region", "mirror", "orders", "--to", "us"); err != nil || !strings.Contains(out, "created mirror of topic orders: eu -> us") {
		t.Fatalf("mirror orders: %v\n%s", err, out)
	}
	if out, err = runCLI(t, d, "topic", "describe", "orders"); err != nil || !strings.Contains(out, "LAG (EVENTS)") {
		t.Fatalf("topic describe shows no mirror lag: %v\n%s", err, out)
	}
	out, err = runCLI(t, d, "residency", "report")
	if err != nil || !strings.Contains(out, "us:orders(mirror of orders)") || !strings.Contains(out, "No violations.") {
		t.Fatalf("residency report: %v\n%s", err, out)
	}
	if !slices.ContainsFunc(strings.Split(out, "\n"), func(l string) bool {
		return strings.Join(strings.Fields(l), " ") == "jobs.us queue us us - ok"
	}) {
		t.Fatalf("residency report does not list queue jobs.us resident in us (created in us):\n%s", out)
	}
	t.Log(out)

	// residency check: a hand-written mirror of the resident queue in eu
	// is refused; a plain stream is allowed.
	dir := t.TempDir()
	writeConfig := func(name string, sc jetstream.StreamConfig) string {
		b, err := json.Marshal(sc)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// (As nats stream add --config writes a cross-domain mirror: external
	// API prefix.)
	rogue := jetstream.StreamConfig{Name: "rogue_jobs", Mirror: &jetstream.StreamSource{Name: "jobs_us", External: &jetstream.ExternalStream{APIPrefix: "$JS.us.API"}}}
	out, err = runCLI(t, d, "residency", "check", "--region", "eu", "--config", writeConfig("rogue.json", rogue))
	if !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), "queue jobs.us is resident in us") {
		t.Fatalf("residency check of a mirror of jobs.us in eu: want a refusal naming the queue, got %v\n%s", err, out)
	}
	if out, err = runCLI(t, d, "residency", "check", "--region", "eu", "--config", writeConfig("plain.json", jetstream.StreamConfig{Name: "plain", Subjects: []string{"plain.>"}})); err != nil || !strings.Contains(out, "allowed: stream plain may be created in eu") {
		t.Fatalf("residency check of a plain stream: %v\n%s", err, out)
	}
	if out, err = runCLI(t, d, "residency", "check", "--region", "eu"); err == nil || !strings.Contains(err.Error(), "--config") {
		t.Fatalf("residency check without --config: want an error naming --config, got %v\n%s", err, out)
	}
	// The same mirror made through the JetStream API in eu: the gate
	// refuses it; residency audit lists the refusal.
	_, js := adminJetStream(t, d.Trust(), d.URL())
	var apiErr *jetstream.APIError
	if _, err := js.CreateStream(natstest.Context(t, 60*time.Second), rogue); !errors.As(err, &apiErr) || apiErr.ErrorCode != region.GateErrCode {
		t.Fatalf("hand-made mirror of jobs.us in eu: want the gate's refusal, got %v", err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		out, err = runCLI(t, d, "residency", "audit", "--region", "eu")
		if err == nil && strings.Contains(out, "rogue_jobs") && strings.Contains(out, "refused") && strings.Contains(out, "queue jobs.us is resident in us") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("residency audit --region eu does not list the refusal of rogue_jobs: %v\n%s", err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Log(out)
	if out, err = runCLI(t, d, "residency", "audit", "--region", "mars"); !errors.Is(err, control.ErrInvalid) || !strings.Contains(err.Error(), `no region "mars"`) {
		t.Fatalf("residency audit of an unknown region: want an error naming it, got %v\n%s", err, out)
	}

	out, err = runCLI(t, d, "region", "failover", "orders.eu", "--to", "us")
	if !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), "degrade mode") {
		t.Fatalf("resident failover: want a refusal offering degrade mode, got %v\n%s", err, out)
	}
	if out, err = runCLI(t, d, "region", "failover", "orders", "--to", "us", "--dry-run"); err != nil || !strings.Contains(out, "would fail over (dry run): eu -> us") || !strings.Contains(out, "mirror behind: 0 events") {
		t.Fatalf("failover dry run: %v\n%s", err, out)
	}
	if out, err = runCLI(t, d, "region", "failover", "orders", "--to", "us"); err != nil || !strings.Contains(out, "topic orders failed over: eu -> us") || !strings.Contains(out, "duplicate window consumers must absorb") {
		t.Fatalf("failover: %v\n%s", err, out)
	}
	t.Log(out)
	if out, err = runCLI(t, d, "region", "failback", "orders"); err != nil || !strings.Contains(out, "topic orders failed back: us -> eu") || !strings.Contains(out, "mirroring resumed: eu -> us") {
		t.Fatalf("failback: %v\n%s", err, out)
	}
	t.Log(out)
	if out, err = runCLI(t, d, "region", "list"); err != nil || !strings.Contains(out, "eu") || !strings.Contains(out, "us") {
		t.Fatalf("region list: %v\n%s", err, out)
	}
	t.Log(out)
}
