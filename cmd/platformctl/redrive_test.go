package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/daemon/daemontest"
	"github.com/msgplatform/platform/internal/principal/principaltest"
	"github.com/msgplatform/platform/redrive"
	"github.com/msgplatform/platform/redrive/redrivetest"
	"github.com/msgplatform/platform/tenancy"
)

func TestRedrivePreviewGolden(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	p := redrive.Preview{
		DLQ: "payments", ReviewRequired: true, Total: 1200, FirstSeq: 1, LastSeq: 1250, Excluded: 2, Rate: 100, SampleSize: 10,
		Duration: 57 * time.Second,
		Groups: []redrive.Group{
			{Fingerprint: "3fa2c1d9e0b4", Count: 1150, Class: "permanent", FirstSeen: at, LastSeen: at.Add(time.Hour), FirstSeq: 1, LastSeq: 1250, Message: "card number <n> is not a number"},
			{Fingerprint: "9c0e11aa4b21", Count: 50, Class: "max_deliveries", FirstSeen: at, LastSeen: at, FirstSeq: 7, LastSeq: 90, Message: "no outcome after <n> deliveries"},
		},
		Destinations: []redrive.DestCount{{Subject: "payments.order:1", Count: 3}, {Subject: "payments.order:2", Count: 1}},
	}
	var out bytes.Buffer
	if err := writePreview(&out, p); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "redrive_preview.golden", out.String())
}

// platformctl dlq and redrive against a running platformd: browse,
// request, the four-eyes refusal, approve, run with progress, history.
func TestCLIRedrive(t *testing.T) {
	d := daemontest.Start(t, 1)
	mustCLI(t, d, "topic", "create", "payments", "--replicas", "1", "--owner", "payments-team", "--review", "required")
	nc := d.AdminConn(t)
	js, _ := jetstream.New(nc)
	redrivetest.DeadLetter(t, js, "payments", "ledger", 0, 12, "card number %d is not a number")

	out := mustCLI(t, d, "dlq", "list")
	if !regexp.MustCompile(`payments\s+topic\s+payments-team\s+required\s+12\s`).MatchString(out) {
		t.Fatalf("dlq list:\n%s", out)
	}
	out = mustCLI(t, d, "dlq", "show", "payments", "--limit", "3")
	if strings.Count(out, "card number") != 3 {
		t.Fatalf("dlq show:\n%s", out)
	}
	out = mustCLI(t, d, "dlq", "show", "payments", "2")
	wantContains(t, "dlq show SEQ", out, "reason:       card number 1 is not a number", "event id:     evt-payments-1", `{"order":1}`, "Platform-Dlq-Group: ledger")
	out = mustCLI(t, d, "dlq", "groups", "payments")
	if !strings.Contains(out, "card number <n> is not a number") || !regexp.MustCompile(`\s12\s+permanent`).MatchString(out) {
		t.Fatalf("dlq groups:\n%s", out)
	}
	out = mustCLI(t, d, "redrive", "request", "payments", "--all", "--reason", "parser fixed", "--dry-run", "--sample", "3", "--sample-window", "1s", "--rate", "100")
	if !strings.Contains(out, "dry run: would redrive 12 entries of DLQ payments") {
		t.Fatalf("dry run:\n%s", out)
	}
	if _, err := runCLI(t, d, "redrive", "request", "payments", "--all"); err == nil || !strings.Contains(err.Error(), "reason") {
		t.Fatalf("request without a reason: %v", err)
	}
	// Four eyes with authenticated principals: each user signs with their
	// own .creds (--user-creds, or PLATFORM_USER_CREDS).
	alice := principaltest.WriteCreds(t, "alice", principaltest.PlatformUser(t, d.Trust(), "alice"))
	bob := principaltest.WriteCreds(t, "bob", principaltest.PlatformUser(t, d.Trust(), "bob"))
	request := []string{"redrive", "request", "payments", "--all", "--reason", "parser fixed", "--sample", "3", "--sample-window", "1s", "--rate", "100"}
	if _, err := runCLI(t, d, append(request, "--as", "alice")...); !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), "--user-creds") {
		t.Fatalf("unsigned request on a review: required DLQ: %v, want a refusal saying to pass --user-creds", err)
	}
	if _, err := runCLI(t, d, append(request, "--user-creds", filepath.Join(t.TempDir(), "none.creds"))...); err == nil || !strings.Contains(err.Error(), "--user-creds") {
		t.Fatalf("missing --user-creds file: %v", err)
	}
	out = mustCLI(t, d, append(request, "--user-creds", alice)...)
	id := requestedID(t, out, 12)
	if !strings.Contains(out, "someone other than alice@platform must run") {
		t.Fatalf("request:\n%s", out)
	}
	if _, err := runCLI(t, d, "redrive", "approve", id, "--user-creds", alice); !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), "someone else") {
		t.Fatalf("self-approval: %v", err)
	}
	if _, err := runCLI(t, d, "redrive", "approve", id, "--as", "bob"); !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), "--user-creds") {
		t.Fatalf("unsigned approval: %v", err)
	}
	if _, err := runCLI(t, d, "redrive", "run", id, "--user-creds", alice); !errors.Is(err, control.ErrConflict) {
		t.Fatalf("run before approval: %v", err)
	}
	t.Setenv("PLATFORM_USER_CREDS", bob)
	mustCLI(t, d, "redrive", "approve", id, "--note", "reviewed the fix")
	t.Setenv("PLATFORM_USER_CREDS", "")
	out = mustCLI(t, d, "redrive", "run", id, "--user-creds", alice, "--interval", "200ms")
	if !strings.Contains(out, id+": running (12 entries, rate 100/s, sample 3)") || !strings.Contains(out, id+" completed: 12/12 done, 12 sent, 0 skipped, 0 failed again") {
		t.Fatalf("run progress:\n%s", out)
	}
	out = mustCLI(t, d, "redrive", "status", id)
	wantContains(t, "status", out, "Redrive "+id+": completed", "approved by bob@platform", "requester:    alice@platform: parser fixed")
	out = mustCLI(t, d, "redrive", "history", id)
	wantContains(t, "history", out, "redrive.request", "redrive.approve", "redrive.run", "redrive.sent", "redrive.complete")
	// Every redriven event is linked: its msg id, the payments stream.
	out = mustCLI(t, d, "redrive", "history", id, "--links")
	if rows := regexp.MustCompile(`redrive:`+regexp.QuoteMeta(id)+`:\d+\s+payments\s+\d+\s`).FindAllString(out, -1); len(rows) != 12 {
		t.Errorf("history --links lists %d redriven events, want 12:\n%s", len(rows), out)
	}
	if out = mustCLI(t, d, "redrive", "status"); !strings.Contains(out, id) {
		t.Errorf("status list:\n%s", out)
	}
}

// platformctl dlq|redrive --tenant T work on tenant T's DLQs in its own
// account: T's DLQs are listed and redriven, another tenant's DLQ is not
// found in T's scope, and T's history holds T's records only.
func TestCLIRedriveTenant(t *testing.T) {
	d := daemontest.Start(t, 1)
	mustCLI(t, d, "tenant", "create", "harbor")
	mustCLI(t, d, "tenant", "create", "meridian")
	mustCLI(t, d, "tenant", "topic", "harbor", "payments", "--replicas", "1")
	mustCLI(t, d, "tenant", "topic", "meridian", "refunds", "--replicas", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	js := d.TenantJetStream(t, ctx, "harbor", "test")
	redrivetest.DeadLetter(t, js, tenancy.StoredName("payments"), "ledger", 0, 5, "card number %d is not a number")

	out := mustCLI(t, d, "dlq", "list", "--tenant", "harbor")
	if !regexp.MustCompile(`payments\s+topic\s+-\s+-\s+5\s`).MatchString(out) {
		t.Fatalf("dlq list --tenant harbor:\n%s", out)
	}
	if out := mustCLI(t, d, "dlq", "list"); strings.Contains(out, "payments") {
		t.Fatalf("the admin account's dlq list shows harbor's DLQ:\n%s", out)
	}
	if out := mustCLI(t, d, "dlq", "list", "--tenant", "meridian"); strings.Contains(out, "payments") || !strings.Contains(out, "refunds") {
		t.Fatalf("dlq list --tenant meridian:\n%s", out)
	}
	if _, err := runCLI(t, d, "dlq", "show", "payments", "--tenant", "meridian"); !errors.Is(err, control.ErrNotFound) {
		t.Fatalf("harbor's DLQ in meridian's scope: %v, want not found", err)
	}
	if _, err := runCLI(t, d, "dlq", "list", "--tenant", "nobody"); !errors.Is(err, control.ErrNotFound) {
		t.Fatalf("unknown tenant: %v, want not found", err)
	}
	out = mustCLI(t, d, "dlq", "show", "payments", "1", "--tenant", "harbor")
	if !strings.Contains(out, "card number 0 is not a number") {
		t.Fatalf("dlq show --tenant:\n%s", out)
	}
	out = mustCLI(t, d, "redrive", "request", "payments", "--tenant", "harbor", "--all", "--reason", "fixed", "--sample", "0", "--rate", "0", "--as", "alice")
	id := requestedID(t, out, 5)
	if _, err := runCLI(t, d, "redrive", "status", id, "--tenant", "meridian"); !errors.Is(err, control.ErrNotFound) {
		t.Fatalf("harbor's request in meridian's scope: %v, want not found", err)
	}
	if !strings.Contains(mustCLI(t, d, "redrive", "status", id, "--tenant", "harbor"), "requester:    unauthenticated:alice") {
		t.Fatal("an unsigned request is not recorded as unauthenticated:<--as>")
	}
	// A tenant's user signs with the .creds `user add` wrote: it acts on
	// its tenant's DLQs, never on another tenant's.
	carol := filepath.Join(t.TempDir(), "carol.creds")
	mustCLI(t, d, "user", "add", "harbor", "carol", "--pub", "payments", "--sub", "payments", "--out", carol)
	if _, err := runCLI(t, d, "redrive", "request", "refunds", "--tenant", "meridian", "--all", "--reason", "x", "--user-creds", carol); !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), "cannot act on tenant meridian") {
		t.Fatalf("harbor's user on meridian's DLQ: %v", err)
	}
	out = mustCLI(t, d, "redrive", "run", id, "--tenant", "harbor", "--user-creds", carol, "--interval", "200ms")
	if !strings.Contains(out, id+" completed: 5/5 done, 5 sent") {
		t.Fatalf("run --tenant:\n%s", out)
	}
	s, _ := js.Stream(ctx, tenancy.StreamName("payments"))
	if info, _ := s.Info(ctx); info.State.Msgs != 10 {
		t.Fatalf("harbor's topic holds %d events, want 5 originals + 5 redriven", info.State.Msgs)
	}
	if out := mustCLI(t, d, "redrive", "history", "--tenant", "harbor"); !strings.Contains(out, "redrive.complete") {
		t.Fatalf("history --tenant harbor:\n%s", out)
	}
	if out := mustCLI(t, d, "redrive", "history", "--tenant", "meridian"); strings.Contains(out, id) {
		t.Fatalf("meridian's history shows harbor's request:\n%s", out)
	}
}
