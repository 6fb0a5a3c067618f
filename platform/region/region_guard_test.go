package region

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
)

// TestResidencyGuardRefusesHandMadeCopies creates, bypassing the platform,
// every kind of cross-border copy of a resident topic in the other
// region: with the real nats CLI (`nats stream add --config`, `nats
// stream edit --config`) and with the JetStream API directly. It counts
// the attempts: none may survive (each created stream is deleted, each
// added source removed), each refusal is in the region's residency audit
// stream naming the topic and its region, and a legitimate copy (a mirror
// of a non-resident topic) is left alone.
func TestResidencyGuardRefusesHandMadeCopies(t *testing.T) {
	rr, rs := twoRegions(t, regionTopic("orders.eu", "eu"), regionTopic("orders", ""))
	ctx := natstest.Context(t, 90*time.Second)
	var mu sync.Mutex
	refusals := map[string]Refusal{}
	g, err := StartGuard(ctx, rs, GuardOptions{OnRefusal: func(r Refusal) {
		mu.Lock()
		defer mu.Unlock()
		refusals[r.Region+"/"+r.Stream+"/"+r.Action] = r
	}})
	if err != nil {
		t.Fatalf("start residency guard: %v", err)
	}
	t.Cleanup(g.Stop)
	us := rs.byName("us")
	for range 5 {
		if _, err := rs[0].JS.Publish(ctx, "orders.eu.k", []byte("resident")); err != nil {
			t.Fatal(err)
		}
	}

	fromEU := func(stream string) *jetstream.StreamSource {
		return &jetstream.StreamSource{Name: stream, External: &jetstream.ExternalStream{APIPrefix: "$JS.eu.API"}}
	}
	cli := natsCLI(t, rr, "us")
	type attempt struct {
		how    string
		stream string
		action string
		do     func() error
	}
	attempts := []attempt{
		{"nats stream add: mirror of orders_eu", "rogue_cli_mirror", "created", func() error {
			return cli.streamAdd(jetstream.StreamConfig{Name: "rogue_cli_mirror", Mirror: fromEU("orders_eu")})
		}},
		{"nats stream add: source of orders_eu", "rogue_cli_source", "created", func() error {
			return cli.streamAdd(jetstream.StreamConfig{Name: "rogue_cli_source", Sources: []*jetstream.StreamSource{fromEU("orders_eu")}})
		}},
		{"JetStream API: mirror of orders_eu (domain eu)", "rogue_api_mirror", "created", func() error {
			_, err := us.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "rogue_api_mirror", Mirror: &jetstream.StreamSource{Name: "orders_eu", Domain: "eu"}})
			return err
		}},
		{"JetStream API: sources orders (allowed) and orders_eu", "rogue_api_sources", "created", func() error {
			_, err := us.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "rogue_api_sources", Sources: []*jetstream.StreamSource{
				{Name: "orders", Domain: "eu"}, {Name: "orders_eu", Domain: "eu"}}})
			return err
		}},
	}
	// The update route: a legitimate stream sourcing the non-resident
	// topic gains a source of the resident one with `nats stream edit`.
	legit := jetstream.StreamConfig{Name: "us_orders_copy", Sources: []*jetstream.StreamSource{fromEU("orders")}}
	if _, err := us.JS.CreateStream(ctx, legit); err != nil {
		t.Fatalf("create legitimate copy of the non-resident topic: %v", err)
	}
	attempts = append(attempts, attempt{"nats stream edit: add source orders_eu", "us_orders_copy", "updated", func() error {
		edited := legit
		edited.Sources = append(append([]*jetstream.StreamSource(nil), legit.Sources...), fromEU("orders_eu"))
		return cli.streamEdit(edited)
	}})

	accepted := 0
	for _, a := range attempts {
		if err := a.do(); err != nil {
			t.Logf("%s: refused by the server: %v", a.how, err)
			continue
		}
		accepted++ // accepted by JetStream; the guard must undo it
	}
	survived := 0
	for _, a := range attempts {
		key := "us/" + a.stream + "/" + a.action
		natstest.WaitFor(t, 10*time.Second, func() error {
			mu.Lock()
			defer mu.Unlock()
			if _, ok := refusals[key]; !ok {
				return errors.New(a.how + ": no refusal by the guard yet")
			}
			return nil
		})
		mu.Lock()
		ref := refusals[key]
		mu.Unlock()
		if ref.Error != "" || len(ref.Problems) == 0 || !strings.Contains(ref.Problems[0], "topic orders.eu is resident in eu") {
			t.Errorf("%s: refusal %+v: want a problem naming topic orders.eu and its region eu, no error", a.how, ref)
		}
		s, err := us.JS.Stream(ctx, a.stream)
		switch {
		case a.action == "created" && !errors.Is(err, jetstream.ErrStreamNotFound):
			survived++
			t.Errorf("%s: stream %s still exists after the guard (err %v)", a.how, a.stream, err)
		case a.action == "updated":
			if err != nil {
				t.Fatalf("%s: the legitimate stream %s is gone: %v", a.how, a.stream, err)
			}
			srcs := s.CachedInfo().Config.Sources
			if len(srcs) != 1 || srcs[0].Name != "orders" {
				survived++
				t.Errorf("%s: stream %s sources after the guard: %d (want only orders)", a.how, a.stream, len(srcs))
			}
		}
		t.Logf("%s: %s (%s): %s", a.how, ref.Remedy, ref.Action, ref.Problems[0])
	}
	audit, err := rs.Audit(ctx, "us")
	if err != nil {
		t.Fatalf("residency audit: %v", err)
	}
	if len(audit) < len(attempts) {
		t.Errorf("residency audit in us holds %d refusals, want %d", len(audit), len(attempts))
	}
	// A mirror of the non-resident topic is no violation: left alone.
	if _, err := rs.Mirror(ctx, MirrorRequest{Topic: "orders", To: "us"}); err != nil {
		t.Fatalf("platform mirror of the non-resident topic: %v", err)
	}
	time.Sleep(500 * time.Millisecond)
	if _, err := us.JS.Stream(ctx, "orders"); err != nil {
		t.Errorf("the guard removed the legitimate mirror of orders: %v", err)
	}
	rep, err := rs.Report(ctx)
	if err != nil {
		t.Fatalf("residency report: %v", err)
	}
	if len(rep.Violations) != 0 {
		t.Errorf("residency report after the guard: %v", rep.Violations)
	}
	t.Logf("%d hand-made cross-border copies of resident orders.eu tried (%d with the nats CLI %s, %d with the JetStream API): %d accepted by JetStream, %d refused by the guard, %d survived; audit records in us: %d; guard refusals: %d",
		len(attempts), 3, cli.bin, 2, accepted, len(attempts)-survived, survived, len(audit), g.Refused())
	if survived != 0 {
		t.Fatalf("%d of %d cross-border copies survived", survived, len(attempts))
	}
}

// natsTool runs the real nats CLI against one in-process region.
type natsTool struct {
	t     *testing.T
	bin   string
	urls  string
	creds string
}

// natsCLI returns the nats CLI (~/go/bin/nats, else nats on PATH) set up
// for region name as the platform admin; it skips the test when no CLI is
// installed (go install github.com/nats-io/natscli/nats@latest).
func natsCLI(t *testing.T, rr *natstest.Regions, name string) *natsTool {
	t.Helper()
	bin := ""
	if home, err := os.UserHomeDir(); err == nil {
		if p := filepath.Join(home, "go", "bin", "nats"); fileExists(p) {
			bin = p
		}
	}
	if bin == "" {
		p, err := exec.LookPath("nats")
		if err != nil {
			t.Skip("the nats CLI is not installed (~/go/bin/nats or on PATH): go install github.com/nats-io/natscli/nats@latest")
		}
		bin = p
	}
	creds, err := rr.Trust().AdminCreds()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "admin.creds")
	if err := os.WriteFile(file, creds, 0o600); err != nil {
		t.Fatal(err)
	}
	return &natsTool{t: t, bin: bin, urls: rr.Region(name).ClientURLs(), creds: file}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// streamAdd runs `nats stream add NAME --config FILE` with cfg.
func (n *natsTool) streamAdd(cfg jetstream.StreamConfig) error {
	return n.runConfig(cfg, "stream", "add", cfg.Name)
}

// streamEdit runs `nats stream edit NAME --config FILE --force` with cfg.
func (n *natsTool) streamEdit(cfg jetstream.StreamConfig) error {
	return n.runConfig(cfg, "stream", "edit", cfg.Name, "--force")
}

func (n *natsTool) runConfig(cfg jetstream.StreamConfig, args ...string) error {
	n.t.Helper()
	_, err := n.runConfigOut(cfg, nil, args...)
	return err
}

// runConfigOut runs the nats CLI with global flags global, args and
// --config FILE (cfg), and returns its combined output.
func (n *natsTool) runConfigOut(cfg jetstream.StreamConfig, global []string, args ...string) (string, error) {
	n.t.Helper()
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		n.t.Fatal(err)
	}
	file := filepath.Join(n.t.TempDir(), cfg.Name+".json")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		n.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return n.run(ctx, global, append(args, "--config", file)...)
}

// run runs the nats CLI with global flags global and args, and returns
// its combined output (also in the error when it exits non-zero).
func (n *natsTool) run(ctx context.Context, global []string, args ...string) (string, error) {
	n.t.Helper()
	full := append([]string{"--server", n.urls, "--creds", n.creds, "--timeout", "5s"}, global...)
	full = append(full, args...)
	cmd := exec.CommandContext(ctx, n.bin, full...)
	cmd.Env = append(os.Environ(), "HOME="+n.t.TempDir(), "NATS_CONTEXT=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), errors.New(strings.TrimSpace(string(out)) + ": " + err.Error())
	}
	return string(out), nil
}
