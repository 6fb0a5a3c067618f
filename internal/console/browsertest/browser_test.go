package browsertest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/msgplatform/platform/internal/console/consoletest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/redrive"
	"github.com/msgplatform/platform/tenancy"
)

// browser finds a Chromium: $CHROME_PATH, chromium, chromium-browser or
// google-chrome on PATH ("" if none).
func browser() string {
	if p := os.Getenv("CHROME_PATH"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// The console end to end in headless Chromium: alice (tenant harbor)
// signs in with her .creds, files a redrive of the review-required
// payments DLQ, and her own approval is refused on the page; bob signs
// in, approves and runs it; the page follows the run to completed and
// shows every entry sent. The topic then holds each event twice (the
// original and its redrive: 0 lost, 0 duplicated) and the DLQ is empty.
func TestConsoleBrowserFourEyes(t *testing.T) {
	exe := browser()
	if exe == "" {
		t.Skip("no Chromium found (set CHROME_PATH, or apt-get install chromium): the browser test needs one")
	}
	f := consoletest.Start(t, 1)
	const n = 6
	js := f.TenantTopic(t, "harbor", "payments", true, n, "alice", "bob")

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer bcancel()

	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, actions...); err != nil {
			page, _ := chromedp.Run(bctx, chromedp.Text(chromedp.CSS("body")))
			t.Fatalf("browser: %s: %v\npage: %s", what, err, page)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("browser: read %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	// tryText reads sel on a page that may be reloading (the run's page
	// reloads on each state change): a node gone between the query and
	// the read is an empty string, not a failure.
	tryText := func(sel string) string {
		tctx, cancel := context.WithTimeout(bctx, 5*time.Second)
		defer cancel()
		s, err := chromedp.Run(tctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			return ""
		}
		return strings.TrimSpace(s)
	}
	location := func() string {
		t.Helper()
		u, err := chromedp.Run(bctx, chromedp.Location())
		if err != nil {
			t.Fatalf("browser: location: %v", err)
		}
		return u
	}
	login := func(who string) {
		t.Helper()
		run("sign in as "+who,
			chromedp.Navigate(f.Base+"/console/"),
			chromedp.WaitVisible(chromedp.CSS("#creds")),
			chromedp.SetValue(chromedp.CSS("#creds"), f.Creds[who]),
			chromedp.Click(chromedp.CSS("#signin")),
			chromedp.WaitVisible(chromedp.CSS("#principal")))
		if got := text("#principal"); got != who {
			t.Fatalf("signed in as %q, want %q", got, who)
		}
	}

	// alice requests.
	login("alice@harbor")
	if got := text("#dlqs"); !strings.Contains(got, "payments") || !strings.Contains(got, "required") {
		t.Fatalf("alice's DLQ list: %q", got)
	}
	var reqURL string
	run("file a request",
		chromedp.Click(chromedp.CSS("a.dlq")),
		chromedp.WaitVisible(chromedp.CSS("#request-form")),
		chromedp.SetValue(chromedp.CSS("#reason"), "card processor fixed (INC-42)"),
		chromedp.SetValue(chromedp.CSS("#rate"), "50"),
		chromedp.Click(chromedp.CSS("#submit-request")),
		chromedp.WaitVisible(chromedp.CSS("#request")))
	reqURL = location()
	if st, req := text("#state"), text("#requester"); st != "requested" || req != "alice@harbor" {
		t.Fatalf("after filing: state %q requester %q", st, req)
	}
	// Her own approval is refused, on the page.
	run("self-approve", chromedp.Click(chromedp.CSS("#approve")), chromedp.WaitVisible(chromedp.CSS("#error")))
	if msg := text("#error"); !strings.Contains(msg, "refused") || !strings.Contains(msg, "someone else") {
		t.Fatalf("self-approval message: %q", msg)
	}
	if st := text("#state"); st != "requested" {
		t.Fatalf("after the refused self-approval: state %q", st)
	}
	run("log out", chromedp.Click(chromedp.CSS("#logout")), chromedp.WaitVisible(chromedp.CSS("#creds")))

	// bob approves and runs.
	login("bob@harbor")
	run("open the request", chromedp.Navigate(reqURL), chromedp.WaitVisible(chromedp.CSS("#approve")))
	run("approve", chromedp.Click(chromedp.CSS("#approve")), chromedp.WaitVisible(chromedp.CSS("#notice")))
	if st, by := text("#state"), text("#approver"); st != "approved" || by != "bob@harbor" {
		t.Fatalf("after bob's approval: state %q approver %q", st, by)
	}
	run("run", chromedp.Click(chromedp.CSS("#run")), chromedp.WaitVisible(chromedp.CSS("#request")))
	// The page polls the run and reloads on each state change.
	deadline := time.Now().Add(60 * time.Second)
	for tryText("#state") != "completed" {
		if time.Now().After(deadline) {
			t.Fatalf("the page never showed completed; state %q sent %q", tryText("#state"), tryText("#sent"))
		}
		time.Sleep(300 * time.Millisecond)
	}
	if sent := text("#sent"); sent != "6" {
		t.Fatalf("page shows sent %q, want %d", sent, n)
	}

	// The outcome in the tenant's account.
	s, err := js.Stream(ctx, tenancy.StreamName("payments"))
	if err != nil {
		t.Fatal(err)
	}
	info, _ := s.Info(ctx)
	if info.State.Msgs != 2*n {
		t.Fatalf("topic holds %d events, want %d originals + %d redriven", info.State.Msgs, n, n)
	}
	dlq, _ := js.Stream(ctx, platform.DLQStream(tenancy.StoredName("payments")))
	if di, _ := dlq.Info(ctx); di.State.Msgs != 0 {
		t.Fatalf("DLQ still holds %d entries", di.State.Msgs)
	}
	svc, err := f.D.RedriveFor(ctx, "harbor")
	if err != nil {
		t.Fatal(err)
	}
	hist, err := svc.History(ctx, redrive.HistoryFilter{})
	if err != nil {
		t.Fatal(err)
	}
	who := map[string]string{}
	for _, r := range hist {
		if r.Tenant != "harbor" {
			t.Fatalf("harbor's history holds a record of tenant %q", r.Tenant)
		}
		who[r.Action] = r.Actor
	}
	if who[redrive.ActionRequest] != "alice@harbor" || who[redrive.ActionApprove] != "bob@harbor" || who[redrive.ActionRun] != "bob@harbor" || who[redrive.ActionComplete] == "" {
		t.Fatalf("audit actors: %v", who)
	}
	// The audit history page shows them too.
	run("history", chromedp.Navigate(f.Base+"/console/history"), chromedp.WaitVisible(chromedp.CSS("#history")))
	if h := text("#history"); !strings.Contains(h, "redrive.approve") || !strings.Contains(h, "bob@harbor") {
		t.Fatalf("history page: %q", h)
	}
}
