package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/conf"
	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/daemon/daemontest"
)

// startDaemon starts cfg's platformd (daemontest.StartConfig: defaults
// filled, closed when the test ends) as a daemontest.Daemon, so runCLI and
// mustCLI reach its first node with its admin creds.
func startDaemon(t *testing.T, cfg *conf.Config) *daemontest.Daemon {
	t.Helper()
	return &daemontest.Daemon{Daemon: daemontest.StartConfig(t, cfg), Config: cfg}
}

// newTrust is a fresh embeddednats.NewTrust; an error ends the test.
func newTrust(t *testing.T) *embeddednats.Trust {
	t.Helper()
	trust, err := embeddednats.NewTrust()
	if err != nil {
		t.Fatal(err)
	}
	return trust
}

// writeCreds writes trust's admin .creds file (0600) in a fresh
// t.TempDir() and returns its path; an error ends the test.
func writeCreds(t *testing.T, trust *embeddednats.Trust) string {
	t.Helper()
	p, err := trust.WriteCreds(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// adminJetStream connects to url with trust's admin creds and opts (the
// connection closes when the test ends) and returns the connection and
// its JetStream; an error ends the test.
func adminJetStream(t *testing.T, trust *embeddednats.Trust, url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc := daemontest.Admin(t, trust, url, opts...)
	return nc, natstest.JetStream(t, nc)
}

// wantContains reports a test error for each of wants that out (the output
// of what) lacks.
func wantContains(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("%s lacks %q:\n%s", what, want, out)
		}
	}
}

// approveAndRun approves redrive id with approver's .creds and runs it with
// runner's (flags, such as --tenant, given to both), and fails the test
// unless the run completes with all n entries sent, none skipped or failed.
func approveAndRun(t *testing.T, d *daemontest.Daemon, id, approver, runner string, n int, flags ...string) {
	t.Helper()
	mustCLI(t, d, append([]string{"redrive", "approve", id, "--user-creds", approver}, flags...)...)
	out := mustCLI(t, d, append([]string{"redrive", "run", id, "--user-creds", runner, "--interval", "200ms"}, flags...)...)
	if want := fmt.Sprintf("%s completed: %d/%d done, %d sent, 0 skipped, 0 failed again", id, n, n, n); !strings.Contains(out, want) {
		t.Fatalf("run of %s lacks %q:\n%s", id, want, out)
	}
}

// requestedID is the id of the redrive request that `redrive request`
// reported in out; the test fails unless out says it holds n entries.
func requestedID(t *testing.T, out string, n int) string {
	t.Helper()
	m := regexp.MustCompile(`requested (rd-\S+): (\d+) entries`).FindStringSubmatch(out)
	if m == nil || m[2] != strconv.Itoa(n) {
		t.Fatalf("redrive request, want %d entries:\n%s", n, out)
	}
	return m[1]
}
