package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/cli"
	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/daemon/daemontest"
	"github.com/msgplatform/platform/redrive/redrivetest"
)

// natsBin is the real nats CLI (~/go/bin/nats, else on PATH); the test
// skips without it.
func natsBin(t *testing.T) string {
	t.Helper()
	if home, err := os.UserHomeDir(); err == nil {
		if p := filepath.Join(home, "go", "bin", "nats"); fileExists(p) {
			return p
		}
	}
	p, err := exec.LookPath("nats")
	if err != nil {
		t.Skip("the nats CLI is not installed (~/go/bin/nats or on PATH): go install github.com/nats-io/natscli/nats@latest")
	}
	return p
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Four-eyes on the platform scope with operators minted by the CLI, on a
// 3-node fabric: operator add alice and bob (0600 .creds the nats CLI
// connects with), alice requests a redrive of a review: required platform
// topic, her own approval is refused, bob's works, the run completes;
// bob is revoked (by alice): his next signed approval is refused and
// changes nothing, the broker closes his connection and refuses the nats
// CLI; bad input changes nothing; every change is audited.
func TestCLIOperators(t *testing.T) {
	d := daemontest.Start(t, 3)
	natsCLIBin := natsBin(t)
	dir := t.TempDir()
	aliceCreds, bobCreds := filepath.Join(dir, "alice.creds"), filepath.Join(dir, "bob.creds")

	out := mustCLI(t, d, "operator", "add", "alice", "--out", aliceCreds)
	if !strings.Contains(out, "operator alice added (alice@platform") {
		t.Fatalf("operator add alice:\n%s", out)
	}
	mustCLI(t, d, "operator", "add", "bob", "--out", bobCreds)
	for _, f := range []string{aliceCreds, bobCreds} {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: mode %v, want 0600", f, st.Mode().Perm())
		}
		b, _ := os.ReadFile(f)
		if !strings.Contains(string(b), "-----BEGIN NATS USER JWT-----") || !strings.Contains(string(b), "-----BEGIN USER NKEY SEED-----") {
			t.Fatalf("%s is not a .creds file:\n%s", f, b)
		}
	}
	// The real nats CLI connects with an operator's creds.
	natsCmd := func(creds string, args ...string) (string, error) {
		all := append([]string{"--server", d.URL(), "--creds", creds, "--timeout", "3s"}, args...)
		b, err := exec.Command(natsCLIBin, all...).CombinedOutput()
		return string(b), err
	}
	if o, err := natsCmd(aliceCreds, "account", "info"); err != nil || !strings.Contains(o, d.Trust().AdminAccount()) {
		t.Fatalf("nats account info with alice's creds: %v\n%s", err, o)
	}

	listBefore := mustCLI(t, d, "operator", "list")
	for _, re := range []string{`admin@platform\s+bootstrap`, `alice@platform\s+active\s+\S+\s+admin@platform\s+U`, `bob@platform\s+active`} {
		if !regexp.MustCompile(re).MatchString(listBefore) {
			t.Fatalf("operator list lacks %s:\n%s", re, listBefore)
		}
	}

	// Bad input: a clear error, nothing written, nothing changed.
	other := filepath.Join(dir, "other.creds")
	for _, c := range []struct {
		args []string
		want string
		kind error
	}{
		{[]string{"operator", "add", "Bad_Name", "--out", other}, `operator name "Bad_Name"`, nil},
		{[]string{"operator", "add", "admin", "--out", other}, "reserved for the bootstrap admin", nil},
		{[]string{"operator", "add", "carol"}, "--out FILE is required", nil},
		{[]string{"operator", "add", "carol", "--out", aliceCreds}, "exists; pass --force", nil},
		{[]string{"operator", "add", "carol", "--out", filepath.Join(dir, "no-such-dir", "c.creds")}, "cannot write there", nil},
		{[]string{"operator", "add", "alice", "--out", other}, "platform operator alice already exists", control.ErrConflict},
		{[]string{"operator", "revoke", "admin"}, "bootstrap admin user (trust.json) cannot be revoked", nil},
		{[]string{"operator", "revoke", "nobody"}, "no platform operator nobody", control.ErrNotFound},
	} {
		_, err := runCLI(t, d, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) || (c.kind != nil && !errors.Is(err, c.kind)) {
			t.Errorf("platformctl %s: %v, want an error containing %q", strings.Join(c.args, " "), err, c.want)
		}
	}
	if fileExists(other) {
		t.Fatalf("a refused operator add wrote %s", other)
	}
	if b, _ := os.ReadFile(aliceCreds); !strings.Contains(string(b), "NATS USER JWT") {
		t.Fatal("a refused add overwrote alice's creds")
	}
	if got := mustCLI(t, d, "operator", "list"); got != listBefore {
		t.Fatalf("refused commands changed the registry:\nbefore:\n%s\nafter:\n%s", listBefore, got)
	}

	// Four eyes on a platform topic with the CLI-minted operators.
	mustCLI(t, d, "topic", "create", "payments", "--replicas", "3", "--owner", "payments-team", "--review", "required")
	mustCLI(t, d, "topic", "create", "refunds", "--replicas", "3", "--owner", "payments-team", "--review", "required")
	nc := d.AdminConn(t)
	js, _ := jetstream.New(nc)
	redrivetest.DeadLetter(t, js, "payments", "ledger", 0, 12, "card number %d is not a number")
	redrivetest.DeadLetter(t, js, "refunds", "ledger", 0, 5, "card number %d is not a number")
	request := []string{"redrive", "request", "payments", "--all", "--reason", "parser fixed", "--sample", "3", "--sample-window", "1s", "--rate", "100"}
	id := requestedID(t, mustCLI(t, d, append(request, "--user-creds", aliceCreds)...), 12)
	if _, err := runCLI(t, d, "redrive", "approve", id, "--user-creds", aliceCreds); !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), "someone else") {
		t.Fatalf("alice approving her own request: %v", err)
	}
	approveAndRun(t, d, id, bobCreds, aliceCreds, 12)
	out = mustCLI(t, d, "redrive", "status", id)
	for _, want := range []string{"approved by bob@platform", "requester:    alice@platform"} {
		if !strings.Contains(out, want) {
			t.Fatalf("status lacks %q:\n%s", want, out)
		}
	}

	// Revoke bob (signed by alice). His open connection is closed by the
	// broker; his next signed approval is refused and changes nothing.
	bobConn, err := nats.Connect(d.URL(), nats.UserCredentials(bobCreds), nats.NoReconnect())
	if err != nil {
		t.Fatalf("bob connects before his revocation: %v", err)
	}
	defer bobConn.Close()
	request[2] = "refunds"
	id2 := requestedID(t, mustCLI(t, d, append(request, "--user-creds", aliceCreds)...), 5)
	statusBefore := mustCLI(t, d, "redrive", "status", id2)
	out = mustCLI(t, d, "operator", "revoke", "bob", "--user-creds", aliceCreds)
	if !strings.Contains(out, "operator bob@platform revoked") {
		t.Fatalf("revoke:\n%s", out)
	}
	_, err = runCLI(t, d, "redrive", "approve", id2, "--user-creds", bobCreds)
	if !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), "bob@platform") || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("revoked bob's approval: %v, want a refusal naming his revocation", err)
	}
	if got := mustCLI(t, d, "redrive", "status", id2); got != statusBefore || !strings.Contains(got, ": requested") {
		t.Fatalf("a refused approval changed the request:\nbefore:\n%s\nafter:\n%s", statusBefore, got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !bobConn.IsClosed() && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if !bobConn.IsClosed() {
		t.Fatalf("the broker kept bob's connection open after his revocation (status %v)", bobConn.Status())
	}
	if o, err := natsCmd(bobCreds, "account", "info"); err == nil || !strings.Contains(strings.ToLower(o), "authorization") {
		t.Fatalf("nats account info with revoked bob's creds: %v\n%s", err, o)
	}
	if o, err := natsCmd(aliceCreds, "account", "info"); err != nil {
		t.Fatalf("alice after bob's revocation: %v\n%s", err, o)
	}
	if _, err := runCLI(t, d, "operator", "revoke", "bob", "--user-creds", aliceCreds); !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), "already revoked") {
		t.Fatalf("revoking bob twice: %v", err)
	}
	if out := mustCLI(t, d, "operator", "list"); !regexp.MustCompile(`bob@platform\s+revoked \S+ by alice@platform`).MatchString(out) {
		t.Fatalf("operator list after the revocation:\n%s", out)
	}

	// bob again gets a new key; the old creds stay refused. The platform
	// keeps working after the admin account JWT push: carol approves,
	// alice runs, all 5 are sent.
	bob2 := filepath.Join(dir, "bob2.creds")
	mustCLI(t, d, "operator", "add", "bob", "--out", bob2)
	if _, err := runCLI(t, d, "redrive", "approve", id2, "--user-creds", bobCreds); !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("bob's old creds after he was added again: %v", err)
	}
	approveAndRun(t, d, id2, bob2, aliceCreds, 5)

	// Audited: who, what, when.
	out = mustCLI(t, d, "audit", "--limit", "1000")
	for _, re := range []string{
		`operator\.add\s+alice@platform\s+admin@platform`,
		`operator\.add\s+bob@platform\s+admin@platform`,
		`operator\.revoke\s+bob@platform\s+alice@platform`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("audit lacks %s:\n%s", re, out)
		}
	}
	if n := strings.Count(out, "operator.add"); n != 3 {
		t.Errorf("audit has %d operator.add records, want 3 (refused adds are not changes)", n)
	}
}

// runCLIStderr is runCLI that also returns what the command wrote to
// stderr (warnings).
func runCLIStderr(t *testing.T, d *daemontest.Daemon, args ...string) (string, string, error) {
	t.Helper()
	root, out, errOut := testRoot(append([]string{"--server", d.URL(), "--creds", d.Creds(), "--timeout", "30s"}, args...))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := root.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

// credsExpiry is the expiry of a .creds file's user JWT (zero: never).
func credsExpiry(t *testing.T, path string) time.Time {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		t.Fatal(err)
	}
	uc, err := jwt.DecodeUserClaims(tok)
	if err != nil {
		t.Fatal(err)
	}
	if uc.Expires == 0 {
		return time.Time{}
	}
	return time.Unix(uc.Expires, 0)
}

// Operator credentials expire: 90 days by default, --expires DURATION
// (days or a Go duration), 0 for never with a warning; bad durations are
// refused naming the flag and change nothing; operator list shows
// EXPIRES. An operator added with --expires 3s signs requests until then;
// after it, its signed request is refused by platformd (the verifier
// checks the JWT's expiry) and changes nothing, the broker refuses its
// connection and operator list says expired.
func TestCLIOperatorExpiry(t *testing.T) {
	d := daemontest.Start(t, 1)
	dir := t.TempDir()
	creds := func(name string) string { return filepath.Join(dir, name+".creds") }
	listBefore := mustCLI(t, d, "operator", "list")
	for _, bad := range []string{"abc", "-1d", "1.5d", "500ms", "90days", ""} {
		_, err := runCLI(t, d, "operator", "add", "carol", "--out", creds("carol"), "--expires", bad)
		var ue cli.UsageError
		if err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), "--expires") || !strings.Contains(err.Error(), "want a number of days (90d), a duration (720h") {
			t.Errorf("operator add --expires %q: %v, want a usage error naming --expires and what it takes", bad, err)
		}
	}
	if fileExists(creds("carol")) {
		t.Fatal("a refused operator add wrote its creds")
	}
	if got := mustCLI(t, d, "operator", "list"); got != listBefore {
		t.Fatalf("refused adds changed the registry:\n%s", got)
	}

	// The default: 90 days.
	before := time.Now()
	out := mustCLI(t, d, "operator", "add", "dflt", "--out", creds("dflt"))
	exp := credsExpiry(t, creds("dflt"))
	if want := before.Add(90 * 24 * time.Hour); exp.Before(want.Add(-time.Second)) || exp.After(want.Add(time.Minute)) {
		t.Fatalf("default expiry %s, want about %s", exp, want)
	}
	if !strings.Contains(out, "expires "+exp.UTC().Format(time.RFC3339)) {
		t.Fatalf("operator add does not say when the creds expire:\n%s", out)
	}
	// 720h.
	mustCLI(t, d, "operator", "add", "month", "--out", creds("month"), "--expires", "720h")
	if exp := credsExpiry(t, creds("month")); exp.Sub(before) < 720*time.Hour || exp.Sub(before) > 720*time.Hour+time.Minute {
		t.Fatalf("--expires 720h: expiry %s", exp)
	}
	// Never: a warning.
	out, stderr, err := runCLIStderr(t, d, "operator", "add", "forever", "--out", creds("forever"), "--expires", "0")
	if err != nil || !strings.Contains(out, "never expires") || !strings.Contains(stderr, "warning: operator forever's credentials never expire (--expires 0)") {
		t.Fatalf("--expires 0: %v\nstdout: %s\nstderr: %s", err, out, stderr)
	}
	if exp := credsExpiry(t, creds("forever")); !exp.IsZero() {
		t.Fatalf("--expires 0: the JWT expires at %s", exp)
	}

	// A short one: works until it expires, refused after.
	mustCLI(t, d, "operator", "add", "brief", "--out", creds("brief"), "--expires", "3s")
	briefExp := credsExpiry(t, creds("brief"))
	if left := time.Until(briefExp); left <= 0 || left > 4*time.Second {
		t.Fatalf("--expires 3s: the JWT expires in %s", left)
	}
	mustCLI(t, d, "operator", "add", "helper", "--out", creds("helper"), "--expires", "1h", "--user-creds", creds("brief"))
	list := mustCLI(t, d, "operator", "list")
	for _, re := range []string{
		`(?m)^PRINCIPAL\s+STATE\s+ADDED\s+BY\s+PUBLIC KEY\s+EXPIRES$`,
		`(?m)^admin@platform\s+bootstrap.*\s+never$`,
		`(?m)^dflt@platform\s+active\s.*\s` + regexp.QuoteMeta(exp.UTC().Format("2006-01-02T15:04:05Z")) + `$`,
		`(?m)^forever@platform\s+active\s.*\snever$`,
		`(?m)^helper@platform\s+active\s+\S+\s+brief@platform\s`,
		`(?m)^brief@platform\s+active\s.*\s` + regexp.QuoteMeta(briefExp.UTC().Format("2006-01-02T15:04:05Z")) + `$`,
	} {
		if !regexp.MustCompile(re).MatchString(list) {
			t.Fatalf("operator list lacks %s:\n%s", re, list)
		}
	}
	time.Sleep(time.Until(briefExp) + 200*time.Millisecond)
	_, err = runCLI(t, d, "operator", "add", "late", "--out", creds("late"), "--user-creds", creds("brief"))
	if err == nil || !strings.Contains(err.Error(), "brief") || !strings.Contains(err.Error(), "expired at "+briefExp.UTC().Format(time.RFC3339)) {
		t.Fatalf("a signed request of the expired operator: %v, want a refusal naming the expiry", err)
	}
	t.Logf("the expired operator's signed request: %v", err)
	if fileExists(creds("late")) {
		t.Fatal("the refused add wrote its creds")
	}
	list = mustCLI(t, d, "operator", "list")
	if strings.Contains(list, "late@platform") || !regexp.MustCompile(`(?m)^brief@platform\s+expired\s`).MatchString(list) {
		t.Fatalf("operator list after the expiry:\n%s", list)
	}
	// The broker compares whole seconds (expired once exp < now), so a
	// second later at most.
	time.Sleep(time.Until(briefExp.Add(time.Second)) + 100*time.Millisecond)
	if nc, err := nats.Connect(d.URL(), nats.UserCredentials(creds("brief")), nats.NoReconnect()); err == nil {
		nc.Close()
		t.Fatal("the broker accepted the expired operator's connection")
	}
	mustCLI(t, d, "operator", "add", "late", "--out", creds("late"), "--user-creds", creds("helper")) // a valid operator still can
}
