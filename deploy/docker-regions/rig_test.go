package dockerregions_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/dockertest"
	"github.com/msgplatform/platform/platform"
)

// rig is a running compose project of compose.yaml.
type rig struct {
	*dockertest.Rig
	ctl string // the platformctl binary
}

// startRig builds the binary and the image, starts both regions under a
// unique project name on free loopback ports and waits until all six
// nodes are ready. Everything it creates is removed when the test ends.
func startRig(t *testing.T) *rig {
	t.Helper()
	all := append(append([]string(nil), nodes["eu"]...), nodes["us"]...)
	r := &rig{Rig: dockertest.StartRig(t, dockertest.RigSpec{
		Name: "docker-regions", Image: "platformd-regions", Project: "platformdregions",
		Files: []string{"eu.yaml", "us.yaml"}, TLSHosts: tlsHosts(), Nodes: all, LogTail: 60, Ready: 120 * time.Second,
	})}
	r.ctl = buildPlatformctl(t, r.Root)
	return r
}

// platformctl runs the platformctl binary with args and -o json against
// region's three nodes (their published ports, the shared admin creds) and
// decodes its output into out; the region's platformd serves the request
// on its control API (regions.peers names the other region).
func (r *rig) platformctl(t *testing.T, region string, out any, args ...string) {
	t.Helper()
	var stdout, stderr string
	for attempt := 1; ; attempt++ {
		var err error
		stdout, stderr, err = r.platformctlRun(region, append(args, "-o", "json")...)
		if err == nil {
			break
		}
		// A region just restarted may not have elected a stream leader
		// yet; the region commands say when running them again is safe
		// ("run the failback again"; not "primary again", which reports
		// a failback done up to its last step: running it again would
		// find nothing to fail back).
		if attempt < 5 && strings.Contains(stderr, "again") && !strings.Contains(stderr, "primary again") {
			t.Logf("platformctl %s (against %s), attempt %d: %s; running it again", strings.Join(args, " "), region, attempt, firstLine([]byte(stderr)))
			time.Sleep(3 * time.Second)
			continue
		}
		t.Fatalf("platformctl %s (against %s): %v\n%s%s", strings.Join(args, " "), region, err, stdout, stderr)
	}
	if err := json.Unmarshal([]byte(stdout), out); err != nil {
		t.Fatalf("platformctl %s: decode %q: %v", strings.Join(args, " "), stdout, err)
	}
}

// platformctlRun runs the platformctl binary with args against region's
// three nodes once and returns its stdout, stderr and exit error (a
// refusal is a non-zero exit with the reason on stderr).
func (r *rig) platformctlRun(region string, args ...string) (string, string, error) {
	urls := r.URLs(nodes[region]...)
	full := append([]string{"--server", strings.Join(urls, ","), "--creds", filepath.Join(r.Shared, "creds", "admin.creds"),
		"--tls-ca", r.TLS.CAFile(), "--timeout", "60s"}, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var stdout, stderr strings.Builder
	cmd := exec.CommandContext(ctx, r.ctl, full...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// buildPlatformctl builds the platformctl binary of the repository at root
// into a temporary directory.
func buildPlatformctl(t *testing.T, root string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "platformctl")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/platformctl")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build platformctl: %v\n%s", err, out)
	}
	return bin
}

// ids returns the container ids of region's nodes.
func (r *rig) ids(region string) []string {
	var out []string
	for _, n := range nodes[region] {
		out = append(out, r.Containers[n])
	}
	return out
}

// docker runs `docker args...` bounded by 60 s.
func (r *rig) docker(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput(); err != nil {
		t.Fatalf("docker %v: %v\n%s", args, err, out)
	}
}

// linkNetwork is the compose network "link" of the project.
func (r *rig) linkNetwork() string { return r.Name + "_link" }

// cutLink disconnects the us nodes (the dialling side) from the link
// network and waits until neither region's JetStream answers from the
// other; clients keep their published ports (the link network is
// internal, it carries no published port).
func (r *rig) cutLink(t *testing.T, conns map[string]*nats.Conn) {
	t.Helper()
	for _, id := range r.ids("us") {
		r.docker(t, "network", "disconnect", r.linkNetwork(), id)
	}
	dockertest.WaitFor(t, 30*time.Second, "the link to be cut (neither region's JetStream answering from the other)", func() error {
		for _, region := range []string{"eu", "us"} {
			if probeDomain(conns[region], other(region)) == nil {
				return fmt.Errorf("domain %s still answers in %s", other(region), region)
			}
		}
		return nil
	})
}

// reconnectLink reconnects the us nodes to the link network and waits for
// the link.
func (r *rig) reconnectLink(t *testing.T, conns map[string]*nats.Conn) {
	t.Helper()
	for _, id := range r.ids("us") {
		r.docker(t, "network", "connect", r.linkNetwork(), id)
	}
	back := time.Now()
	r.waitLinked(t, conns, 60*time.Second)
	t.Logf("link reconnected and carrying the JetStream API in %s", time.Since(back).Round(time.Millisecond))
}

// connect connects as the platform admin to region's three published
// ports (Rig.Connect).
func (r *rig) connect(t *testing.T, region string) *nats.Conn {
	t.Helper()
	return r.Connect(t, "docker-regions-test-"+region, 250*time.Millisecond, nodes[region]...)
}

// natsCLIOut runs the real nats CLI (~/go/bin/nats, else nats on PATH)
// against region's published ports: `nats stream add NAME --config FILE`
// with cfg as the file (what a user bypassing the platform would type).
// It returns the CLI's output and exit error.
func (r *rig) natsCLIOut(t *testing.T, region string, cfg jetstream.StreamConfig) ([]byte, error) {
	t.Helper()
	bin := natsBinary(t)
	urls := r.URLs(nodes[region]...)
	file := streamConfigFile(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--server", strings.Join(urls, ","),
		"--creds", filepath.Join(r.Shared, "creds", "admin.creds"), "--tlsca", r.TLS.CAFile(), "--timeout", "5s",
		"stream", "add", cfg.Name, "--config", file)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "NATS_CONTEXT=")
	return cmd.CombinedOutput()
}

// streamConfigFile writes cfg as the JSON file nats stream add --config
// (and platformctl residency check --config) read, and returns its path.
func streamConfigFile(t *testing.T, cfg jetstream.StreamConfig) string {
	t.Helper()
	if cfg.Replicas == 0 {
		cfg.Replicas = 1
	}
	// The JSON form of a cross-domain mirror: the domain's API prefix
	// (jetstream.StreamSource.Domain is not serialised; nats.go converts
	// it to this when it creates the stream itself).
	if m := cfg.Mirror; m != nil && m.Domain != "" {
		mm := *m
		mm.External, mm.Domain = &jetstream.ExternalStream{APIPrefix: "$JS." + m.Domain + ".API"}, ""
		cfg.Mirror = &mm
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), cfg.Name+".json")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// natsBinary finds the nats CLI, or fails the test saying how to get it.
func natsBinary(t *testing.T) string {
	t.Helper()
	if home, err := os.UserHomeDir(); err == nil {
		if p := filepath.Join(home, "go", "bin", "nats"); fileExists(p) {
			return p
		}
	}
	if p, err := exec.LookPath("nats"); err == nil {
		return p
	}
	t.Fatalf("the nats CLI is needed (~/go/bin/nats or on PATH): go install github.com/nats-io/natscli/nats@latest")
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// probeDomain asks JetStream domain for its account info through nc
// (across the link when domain is the other region's).
func probeDomain(nc *nats.Conn, domain string) error {
	js, err := jetstream.NewWithDomain(nc, domain)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("domain %s: %w", domain, err)
	}
	return nil
}

// waitLinked waits until each region's JetStream answers through the
// leafnode link from the other (the cross-domain API mirrors use).
func (r *rig) waitLinked(t *testing.T, conns map[string]*nats.Conn, timeout time.Duration) {
	t.Helper()
	dockertest.WaitFor(t, timeout, "the leafnode link (each region's JetStream answers from the other)", func() error {
		return errors.Join(probeDomain(conns["us"], "eu"), probeDomain(conns["eu"], "us"))
	})
}

// tlsHosts are the names the rig's nodes are dialled by (their own, and
// their link and peer aliases): the node certificate names them all.
func tlsHosts() []string {
	var hs []string
	for _, region := range []string{"eu", "us"} {
		for _, n := range nodes[region] {
			hs = append(hs, n, n+"-link", n+"-peer")
		}
	}
	return hs
}

// waitReady polls /readyz on the published HTTP port of each node.
func (r *rig) waitReady(t *testing.T, timeout time.Duration, names ...string) {
	t.Helper()
	dockertest.WaitReady(t, timeout, fmt.Sprintf("%v ready (/readyz 200)", names), r.TLS, r.HTTPPort, names...)
}

// waitMirror waits until stream in js holds last seq >= want and returns
// how long that took.
func waitMirror(t *testing.T, js jetstream.JetStream, stream string, want uint64, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	dockertest.WaitFor(t, timeout, fmt.Sprintf("mirror %s at seq %d", stream, want), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, info, err := dockertest.StreamInfo(ctx, js, stream)
		if err != nil {
			return err
		}
		if info.State.LastSeq < want {
			return fmt.Errorf("last seq %d", info.State.LastSeq)
		}
		return nil
	})
	return time.Since(start)
}

// readIDs reads every message of stream with an ordered consumer and
// returns the event ids (Nats-Msg-Id, else the payload), in order,
// leaving out platformd's canaries.
func readIDs(t *testing.T, js jetstream.JetStream, stream string) []string {
	t.Helper()
	ctx := natstest.Context(t, 30*time.Second)
	s, info, err := dockertest.StreamInfo(ctx, js, stream)
	if err != nil {
		t.Fatal(err)
	}
	want := info.State.Msgs
	var ids []string
	if want == 0 {
		return ids
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatalf("ordered consumer on %s: %v", stream, err)
	}
	var read uint64
	for read < want {
		if ctx.Err() != nil {
			t.Fatalf("read %s: %d of %d messages: %v", stream, read, want, ctx.Err())
		}
		b, err := c.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatalf("read %s: %v", stream, err)
		}
		for m := range b.Messages() {
			read++
			if platform.IsCanary(m.Headers()) {
				continue // platformd's canary, published every canary.interval
			}
			id := m.Headers().Get(jetstream.MsgIDHeader)
			if id == "" {
				id = string(m.Data())
			}
			ids = append(ids, id)
		}
	}
	return ids
}

// assertExactlyOnce checks that got holds every id of want exactly once
// and nothing else.
func assertExactlyOnce(t *testing.T, where string, got, want []string) {
	t.Helper()
	count := make(map[string]int, len(got))
	for _, id := range got {
		count[id]++
	}
	var lost, dup, extra []string
	for _, id := range want {
		switch count[id] {
		case 0:
			lost = append(lost, id)
		case 1:
		default:
			dup = append(dup, fmt.Sprintf("%s x%d", id, count[id]))
		}
		delete(count, id)
	}
	for id := range count {
		extra = append(extra, id)
	}
	if len(lost)+len(dup)+len(extra) > 0 {
		t.Fatalf("%s: %d events, want %d exactly once: lost %d %v, duplicated %d %v, unexpected %d %v",
			where, len(got), len(want), len(lost), head(lost), len(dup), head(dup), len(extra), head(extra))
	}
}

func head(s []string) []string { return s[:min(5, len(s))] }

// coreCount subscribes to subject on nc and counts what arrives.
func coreCount(t *testing.T, nc *nats.Conn, subject string) (*nats.Subscription, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	sub, err := nc.Subscribe(subject, func(*nats.Msg) { n.Add(1) })
	if err != nil {
		t.Fatalf("subscribe %s: %v", subject, err)
	}
	if err := nc.FlushTimeout(5 * time.Second); err != nil {
		t.Fatalf("flush: %v", err)
	}
	return sub, &n
}

func newJS(t *testing.T, nc *nats.Conn) jetstream.JetStream {
	t.Helper()
	return natstest.JetStream(t, nc)
}
