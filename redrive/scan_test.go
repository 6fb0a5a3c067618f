package redrive

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// leaderHolds is what scan asks when the replica it reads says nothing
// more is pending: does the leader hold any entry in a range (deleted
// entries and a purged prefix do not count)?
func TestLeaderHolds(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t, 30*time.Second)
	s, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: "held", Subjects: []string{"held.>"}, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	holds := func(from, to uint64) bool {
		t.Helper()
		ok, err := leaderHolds(ctx, s, from, to)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if holds(1, 10) {
		t.Fatal("empty stream: holds 1..10")
	}
	for i := range 10 {
		if _, err := e.js.Publish(ctx, fmt.Sprintf("held.%d", i+1), nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range []uint64{4, 5, 6} {
		if err := s.DeleteMsg(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSequence(3)); err != nil { // 1 and 2 go
		t.Fatal(err)
	}
	for _, c := range []struct {
		from, to uint64
		want     bool
	}{
		{1, 2, false},   // purged
		{4, 6, false},   // deleted
		{1, 6, true},    // 3 is there
		{5, 7, true},    // 7 is there
		{11, 20, false}, // beyond the last
		{10, 20, true},
	} {
		if got := holds(c.from, c.to); got != c.want {
			t.Errorf("holds %d..%d: %v, want %v", c.from, c.to, got, c.want)
		}
	}
}
