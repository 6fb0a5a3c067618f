package main

import (
	"bytes"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/daemon/daemontest"
	"github.com/msgplatform/platform/internal/principal/principaltest"
	"github.com/msgplatform/platform/platform/catalog"
)

func TestGroupResetOutputGolden(t *testing.T) {
	// The guide's figure: 36 M events at 50,000/s against 20,000/s ≈ 20 min.
	d, ok := catalog.DrainTime(36_000_000, 50_000, 20_000)
	r := catalog.GroupReset{
		Group: "sales-analytics", Topic: "orders", Target: "time 2026-03-01T12:00:00Z", DryRun: true,
		Partitions: []catalog.GroupResetPosition{
			{Partition: 0, Consumer: "sales-analytics-p0", CurrentSeq: 70_000_001, Pending: 0, NewSeq: 34_000_001, ToProcess: 18_000_000},
			{Partition: 1, Consumer: "sales-analytics-p1", CurrentSeq: 70_000_002, Pending: 0, NewSeq: 34_000_002, ToProcess: 18_000_000},
		},
		ToProcess: 36_000_000, ConsumeRate: 50_000, ArrivalRate: 20_000, DrainTime: d, Drains: ok,
	}
	var out bytes.Buffer
	if err := writeGroupReset(&out, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "≈ 20m0s") {
		t.Errorf("drain estimate missing:\n%s", out.String())
	}
	checkGolden(t, "group_reset.golden", out.String())
}

func TestParseResetTime(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"2026-03-01T10:00:00Z": now.Add(-2 * time.Hour),
		"2h":                   now.Add(-2 * time.Hour),
		"-30m":                 now.Add(-30 * time.Minute),
	} {
		got, err := parseResetTime(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("parseResetTime(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	if _, err := parseResetTime("yesterday", now); err == nil {
		t.Error("yesterday parsed")
	}
}

func TestCLIGroupReset(t *testing.T) {
	d := daemontest.Start(t, 3)
	out := mustCLI(t, d, "group", "reset", "email-notifier", "--to-start", "--dry-run", "--rate-window", "0")
	if !strings.Contains(out, "dry run: would reset group email-notifier on topic orders to start") {
		t.Fatalf("dry run output:\n%s", out)
	}
	if _, err := runCLI(t, d, "group", "reset", "email-notifier", "--to-end", "--rate-window", "0"); err == nil || !strings.Contains(err.Error(), "--reason") {
		t.Fatalf("reset without --reason: %v, want a usage error naming --reason", err)
	}
	out = mustCLI(t, d, "group", "reset", "email-notifier", "--to-end", "--consume-rate", "50000", "--arrival-rate", "20000", "--reason", "skip the test backlog")
	if !strings.Contains(out, "reset group email-notifier") {
		t.Fatalf("reset output:\n%s", out)
	}
	// A reviewed topic refuses a direct reset; it runs through a request
	// approved by someone else, once.
	mustCLI(t, d, "topic", "create", "payments", "--review", "required")
	mustCLI(t, d, "group", "create", "ledger", "--topic", "payments")
	_, err := runCLI(t, d, "group", "reset", "ledger", "--to-start", "--rate-window", "0", "--reason", "replay")
	if !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), "--request") {
		t.Fatalf("direct reset of a reviewed topic: %v", err)
	}
	if _, err := runCLI(t, d, "group", "reset", "ledger", "--to-start", "--request"); err == nil {
		t.Fatal("request without --reason accepted")
	}
	// The review path is signed: each user with their own .creds.
	alice := principaltest.WriteCreds(t, "alice", principaltest.PlatformUser(t, d.Trust(), "alice"))
	bob := principaltest.WriteCreds(t, "bob", principaltest.PlatformUser(t, d.Trust(), "bob"))
	if _, err := runCLI(t, d, "group", "reset", "ledger", "--to-start", "--request", "--reason", "replay", "--as", "alice"); !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), "--user-creds") {
		t.Fatalf("unsigned reset request: %v, want a refusal saying to pass --user-creds", err)
	}
	out = mustCLI(t, d, "group", "reset", "ledger", "--to-start", "--request", "--reason", "replay after the ledger fix", "--user-creds", alice)
	m := regexp.MustCompile(`reset request (\S+): requested`).FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "requested by alice@platform") {
		t.Fatalf("request output:\n%s", out)
	}
	id := m[1]
	if _, err := runCLI(t, d, "group", "reset", "--approve", id, "--user-creds", alice); !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), "cannot approve it") {
		t.Fatalf("self-approval: %v, want a refusal", err)
	}
	if _, err := runCLI(t, d, "group", "reset", "--approve", id, "--as", "bob", "--reason", "checked"); !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), "--user-creds") {
		t.Fatalf("unsigned approval: %v, want a refusal", err)
	}
	mustCLI(t, d, "group", "reset", "--approve", id, "--user-creds", bob, "--reason", "checked")
	out = mustCLI(t, d, "group", "reset", "--execute", id, "--user-creds", alice)
	if !strings.Contains(out, "reset group ledger on topic payments to start") {
		t.Fatalf("execute output:\n%s", out)
	}
	if _, err := runCLI(t, d, "group", "reset", "--execute", id, "--user-creds", alice); !errors.Is(err, control.ErrConflict) {
		t.Fatalf("second execute: %v, want a refusal", err)
	}
	out = mustCLI(t, d, "group", "reset", "--show", id)
	if !strings.Contains(out, "executed") || !strings.Contains(out, "approved by bob@platform: checked") || !strings.Contains(out, "executed by alice@platform") {
		t.Fatalf("show output:\n%s", out)
	}
	if _, err := runCLI(t, d, "group", "reset", "ledger"); err == nil {
		t.Fatal("reset without a target accepted")
	}
}
