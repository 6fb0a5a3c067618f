package main

import (
	"bytes"
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/redrive"
)

// follow after a run: a status read older than the run's own revision (a
// bucket replica that had not applied it, "approved") is read again, not
// taken for the end of the run (which would end the run command at once
// with "approved: 0/12 done" while the run goes on).
func TestFollowSkipsReadsOlderThanTheRun(t *testing.T) {
	f := natstest.RunFabric(t, 1)
	creds := writeCreds(t, f.Trust())
	var calls atomic.Int32
	status := func(_ context.Context, _ redrive.IDRequest) (redrive.Status, error) {
		st := redrive.Status{Revision: 3}
		st.ID, st.Total, st.State = "rd-1", 12, redrive.StateApproved // stale: before the run
		switch n := calls.Add(1); {
		case n == 3:
			st.Revision, st.State, st.Progress.Next = 5, redrive.StateRunning, 4
		case n > 3:
			st.Revision, st.State, st.Progress.Next = 6, redrive.StateCompleted, 12
		}
		return st, nil
	}
	g := &globalOptions{server: f.Node(0).ClientURL(), creds: creds, timeout: "5s"}
	nc, err := g.connect() // the service, as platformd, in the admin account
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	svc, err := control.Serve(nc, []control.Endpoint{{Name: "status", Subject: redrive.SubjStatus, Handle: control.JSON(status)}}, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.follow(ctx, &out, "", "rd-1", 5, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "approved") || !strings.Contains(out.String(), "rd-1 completed: 12/12 done") || calls.Load() != 4 {
		t.Fatalf("follow since revision 5 printed (after %d reads):\n%s", calls.Load(), out.String())
	}
}
