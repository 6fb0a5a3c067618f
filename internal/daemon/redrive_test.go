package daemon_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/daemon/daemontest"
	"github.com/msgplatform/platform/internal/principal/principaltest"
	"github.com/msgplatform/platform/redrive"
)

// The redrive control API end to end: browse, request, the four-eyes
// refusal as a 409, approve, run, status, history, and the audit records
// in the shared audit log.
func TestRedriveControlAPI(t *testing.T) {
	d, nc, js, ctx := daemontest.StartAdmin(t, 1, 60*time.Second, nats.Name("redrive-test"))
	call := func(subject string, req, resp any) error { return control.Call(ctx, nc, subject, req, resp) }

	reviewedPayments(t, ctx, nc, js, 1)

	var dlqs []redrive.DLQ
	if err := call(redrive.SubjDLQList, nil, &dlqs); err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, q := range dlqs {
		if q.Name == "payments" {
			found = q.Depth == 8 && q.Owner == "payments-team" && q.ReviewRequired
		}
	}
	if !found {
		t.Fatalf("dlq list: %+v", dlqs)
	}
	var groups []redrive.Group
	if err := call(redrive.SubjDLQGroups, redrive.EntryFilter{DLQ: "payments"}, &groups); err != nil || len(groups) != 1 || groups[0].Count != 8 {
		t.Fatalf("groups %+v, %v", groups, err)
	}
	if err := call(redrive.SubjRequest, redrive.Request{DLQ: "payments"}, nil); !errors.Is(err, control.ErrInvalid) || !strings.Contains(err.Error(), "reason") {
		t.Fatalf("malformed request: %v", err)
	}
	// Four eyes through the control API: signed with each user's .creds
	// (principal_test.go covers the refusals in detail).
	alice := signer(t, principaltest.PlatformUser(t, d.Trust(), "alice"))
	bob := signer(t, principaltest.PlatformUser(t, d.Trust(), "bob"))
	r := redrive.Request{DLQ: "payments", Selection: redrive.Selection{All: true}, Rate: 200, Reason: "parser fixed", Requester: "alice"}
	var st redrive.Status
	if err := signedCall(ctx, nc, alice, time.Time{}, redrive.SubjRequest, r, &st); err != nil {
		t.Fatal(err)
	}
	err := signedCall(ctx, nc, alice, time.Time{}, redrive.SubjApprove, redrive.Action{ID: st.ID}, nil)
	if !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), "someone else") {
		t.Fatalf("self-approval: %v, want a 409 naming the review rule", err)
	}
	if err := signedCall(ctx, nc, bob, time.Time{}, redrive.SubjApprove, redrive.Action{ID: st.ID, Note: "ok"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := signedCall(ctx, nc, alice, time.Time{}, redrive.SubjRun, redrive.Action{ID: st.ID}, nil); err != nil {
		t.Fatal(err)
	}
	waitCompleted(t, ctx, nc, st.ID, 8, 20*time.Second)
	var hist []redrive.AuditRecord
	if err := call(redrive.SubjHistory, redrive.HistoryFilter{ID: st.ID}, &hist); err != nil || len(hist) < 5 {
		t.Fatalf("history %+v, %v", hist, err)
	}
	if err := call(redrive.SubjStatus, redrive.IDRequest{ID: "rd-none"}, nil); !errors.Is(err, control.ErrNotFound) {
		t.Fatalf("unknown request: %v", err)
	}
}
