package redrive

import (
	"testing"
	"time"

	"github.com/msgplatform/platform/embeddednats/natstest"
)

// Only the runner drives a run while it lives, even when the run's record
// goes unwritten for longer than LeaseTTL (rate 0.5/s: 2 s between
// events, LeaseTTL 1 s): the run's lease says the runner is alive, so an
// eager standby (node-b, looking every 50 ms) never adopts it, neither
// while it runs nor right after a pause and resume claim it again.
func TestLiveRunnerIsNotAdopted(t *testing.T) {
	t.Parallel()
	e := ordersEnv(t, 3)
	a := e.service(func(c *Config) { c.Instance = "node-a" })
	e.service(func(c *Config) { c.Instance, c.AdoptInterval = "node-b", 50*time.Millisecond })
	ctx := natstest.Context(t, 60*time.Second)
	r := req("orders", "alice", Selection{All: true})
	r.Rate = 0.5
	st := startRun(t, ctx, a, r)
	time.Sleep(1500 * time.Millisecond)
	if _, err := a.Pause(ctx, st.ID, "bob", "a look first"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Resume(ctx, st.ID, "bob", ""); err != nil {
		t.Fatal(err)
	}
	done := waitState(t, a, st.ID, StateCompleted, 30*time.Second)
	if done.Runner != "node-a" || done.Epoch != 2 {
		t.Errorf("completed by %s in epoch %d, want node-a in epoch 2 (run, resume)", done.Runner, done.Epoch)
	}
	if got := e.redriven("orders", st.ID); len(got) != 3 {
		t.Errorf("%d events redriven, want 3", len(got))
	}
	hist, err := a.History(ctx, HistoryFilter{ID: st.ID})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hist {
		if h.Action == ActionAdopt {
			t.Errorf("adopted while its runner lived: %+v", h)
		}
	}
}
