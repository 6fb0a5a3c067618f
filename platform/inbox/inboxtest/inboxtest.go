package inboxtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/platform"
)

// Backend is one inbox under test, with what the suite needs of its
// backend (the parts of the API that take backend types).
type Backend[Tx any] struct {
	// Inbox is the inbox, configured as Harness.Open was asked.
	Inbox platform.Inbox[Tx]
	// Write adds one application of the effect named name to tx: the
	// business write the suite counts.
	Write func(tx Tx, name string) error
	// Count returns how many applications of name are committed.
	Count func(t *testing.T, name string) int
	// Seen reports whether the inbox holds a row for eventID.
	Seen func(ctx context.Context, eventID string) (bool, error)
	// Prune and PruneBefore are the inbox's pruning (at the configured
	// retention, and before a cutoff).
	Prune       func(ctx context.Context) (int, error)
	PruneBefore func(ctx context.Context, cut time.Time) (int, error)
	// IfNewer is the inbox's newer-version helper within tx.
	IfNewer func(ctx context.Context, tx Tx, entity string, version int64) (bool, error)
	// ProcessBatch is the inbox's batch processing (optional).
	ProcessBatch func(ctx context.Context, msgs []platform.InboxMsg, effect func(tx Tx, msg platform.InboxMsg) error) ([]platform.InboxOutcome, []error, error)
}

// Harness opens inboxes of one backend.
type Harness[Tx any] struct {
	// Open returns an inbox configured with cfg over a fresh, empty
	// store; a second Open within one test (another consumer) may share
	// the first one's store, or not. It fails t if cfg is refused.
	Open func(t *testing.T, cfg platform.InboxConfig) *Backend[Tx]
	// New constructs an inbox with cfg over a fresh store and returns the
	// constructor's error (for the validation checks).
	New func(t *testing.T, cfg platform.InboxConfig) error
}

// Run runs the whole contract against h as subtests of t.
func Run[Tx any](t *testing.T, h Harness[Tx]) {
	t.Run("FirstAppliesRepeatSkipped", func(t *testing.T) { testOnce(t, h) })
	t.Run("FailedEffectLeavesNoRow", func(t *testing.T) { testFailedEffect(t, h) })
	t.Run("ConcurrentDeliveriesApplyOnce", func(t *testing.T) { testConcurrent(t, h) })
	t.Run("RetentionValidation", func(t *testing.T) { testRetention(t, h) })
	t.Run("PruneInBatchesWhileProcessing", func(t *testing.T) { testPrune(t, h) })
	t.Run("IfNewer", func(t *testing.T) { testIfNewer(t, h) })
	t.Run("ProcessBatch", func(t *testing.T) {
		testBatch(t, h)
	})
}

// Msg is a delivered message: headers and an ack counter.
type Msg struct {
	Header nats.Header
	acks   atomic.Int64
}

// NewMsg returns a message carrying event id id as its Nats-Msg-Id.
func NewMsg(id string) *Msg { return &Msg{Header: nats.Header{jetstream.MsgIDHeader: []string{id}}} }

func (m *Msg) Headers() nats.Header { return m.Header }
func (m *Msg) Ack() error           { m.acks.Add(1); return nil }

// Acks returns how many times the message was acked.
func (m *Msg) Acks() int { return int(m.acks.Load()) }

var errBoom = errors.New("inboxtest: effect failed")

func seen[Tx any](t *testing.T, b *Backend[Tx], id string) bool {
	t.Helper()
	ok, err := b.Seen(context.Background(), id)
	if err != nil {
		t.Fatalf("Seen(%s): %v", id, err)
	}
	return ok
}

func process[Tx any](t *testing.T, b *Backend[Tx], m *Msg, name string) platform.InboxOutcome {
	t.Helper()
	out, err := b.Inbox.Process(context.Background(), m, func(tx Tx) error { return b.Write(tx, name) })
	if err != nil {
		t.Fatalf("Process(%s): %v", name, err)
	}
	return out
}

func defaultConfig(consumer string) platform.InboxConfig {
	return platform.DefaultInboxConfig(consumer)
}

func testOnce[Tx any](t *testing.T, h Harness[Tx]) {
	ctx := context.Background()
	b := h.Open(t, defaultConfig("c1"))
	m := NewMsg("e1")
	if out := process(t, b, m, "e1"); out != platform.InboxProcessed || m.Acks() != 1 {
		t.Fatalf("first delivery: %v, %d acks; want processed, 1 ack", out, m.Acks())
	}
	if !seen(t, b, "e1") || b.Count(t, "e1") != 1 {
		t.Fatalf("after the first delivery: row %v, effects %d; want a row and 1 effect", seen(t, b, "e1"), b.Count(t, "e1"))
	}
	for i := range 2 {
		if out := process(t, b, m, "e1"); out != platform.InboxDuplicate || m.Acks() != 2+i {
			t.Fatalf("repeat %d: %v, %d acks; want duplicate, acked", i+1, out, m.Acks())
		}
	}
	// A redriven copy: its own Nats-Msg-Id, the original event id.
	redriven := &Msg{Header: nats.Header{
		jetstream.MsgIDHeader:        []string{"redrive-7-e1"},
		platform.OriginalMsgIDHeader: []string{"e1"},
	}}
	if out := process(t, b, redriven, "e1"); out != platform.InboxDuplicate || redriven.Acks() != 1 {
		t.Fatalf("redriven copy: %v, %d acks; want duplicate, acked", out, redriven.Acks())
	}
	if n := b.Count(t, "e1"); n != 1 {
		t.Fatalf("effects of e1 after repeats: %d, want 1", n)
	}
	// No event id: refused, nothing applied, not acked.
	bare := &Msg{Header: nats.Header{}}
	if _, err := b.Inbox.Process(ctx, bare, func(tx Tx) error { return b.Write(tx, "bare") }); !errors.Is(err, platform.ErrNoEventID) {
		t.Fatalf("message without an event id: %v, want ErrNoEventID", err)
	}
	if bare.Acks() != 0 || b.Count(t, "bare") != 0 {
		t.Fatalf("message without an event id: %d acks, %d effects; want none", bare.Acks(), b.Count(t, "bare"))
	}
	// Another consumer of the same event applies it too, once.
	b2 := h.Open(t, defaultConfig("c2"))
	m2 := NewMsg("e1")
	if out := process(t, b2, m2, "e1-c2"); out != platform.InboxProcessed {
		t.Fatalf("second consumer, first delivery: %v, want processed", out)
	}
	if out := process(t, b2, m2, "e1-c2"); out != platform.InboxDuplicate {
		t.Fatalf("second consumer, repeat: %v, want duplicate", out)
	}
	if n := b2.Count(t, "e1-c2"); n != 1 {
		t.Fatalf("second consumer's effects: %d, want 1", n)
	}
}

func testFailedEffect[Tx any](t *testing.T, h Harness[Tx]) {
	ctx := context.Background()
	b := h.Open(t, defaultConfig("c1"))
	m := NewMsg("e1")
	_, err := b.Inbox.Process(ctx, m, func(tx Tx) error {
		if err := b.Write(tx, "e1"); err != nil {
			return err
		}
		return errBoom
	})
	if !errors.Is(err, errBoom) {
		t.Fatalf("failed effect: %v, want the effect's error", err)
	}
	if m.Acks() != 0 || seen(t, b, "e1") || b.Count(t, "e1") != 0 {
		t.Fatalf("after a failed effect: %d acks, row %v, %d effects; want none of them", m.Acks(), seen(t, b, "e1"), b.Count(t, "e1"))
	}
	// The redelivery applies it, once.
	if out := process(t, b, m, "e1"); out != platform.InboxProcessed || m.Acks() != 1 {
		t.Fatalf("retry: %v, %d acks; want processed, 1 ack", out, m.Acks())
	}
	if out := process(t, b, m, "e1"); out != platform.InboxDuplicate {
		t.Fatalf("repeat after the retry: %v, want duplicate", out)
	}
	if n := b.Count(t, "e1"); n != 1 || !seen(t, b, "e1") {
		t.Fatalf("after the retry: %d effects, row %v; want 1 and a row", n, seen(t, b, "e1"))
	}
}

func testConcurrent[Tx any](t *testing.T, h Harness[Tx]) {
	ctx := context.Background()
	b := h.Open(t, defaultConfig("c1"))
	const n = 16
	for round := range 3 {
		id := fmt.Sprintf("e%d", round)
		var wg sync.WaitGroup
		start := make(chan struct{})
		outs := make([]platform.InboxOutcome, n)
		errs := make([]error, n)
		msgs := make([]*Msg, n)
		for i := range n {
			msgs[i] = NewMsg(id)
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				outs[i], errs[i] = b.Inbox.Process(ctx, msgs[i], func(tx Tx) error { return b.Write(tx, id) })
			}()
		}
		close(start)
		wg.Wait()
		processed, dups, acks := 0, 0, 0
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("%s delivery %d: %v", id, i, errs[i])
			}
			switch outs[i] {
			case platform.InboxProcessed:
				processed++
			case platform.InboxDuplicate:
				dups++
			}
			acks += msgs[i].Acks()
		}
		if processed != 1 || dups != n-1 || acks != n {
			t.Fatalf("%d concurrent deliveries of %s: %d processed, %d duplicates, %d acks; want 1, %d, %d", n, id, processed, dups, acks, n-1, n)
		}
		if c := b.Count(t, id); c != 1 {
			t.Fatalf("%d concurrent deliveries of %s: %d effects, want 1", n, id, c)
		}
	}
}

func testRetention[Tx any](t *testing.T, h Harness[Tx]) {
	cfg := defaultConfig("c1")
	cfg.Retention = 7 * 24 * time.Hour // the DLQ keeps 14 days
	err := h.New(t, cfg)
	if !errors.Is(err, platform.ErrInvalidInboxConfig) {
		t.Fatalf("retention 7d < DLQ retention 14d: %v, want ErrInvalidInboxConfig", err)
	}
	for _, want := range []string{"retention", "shorter than the DLQ retention", "336h0m0s", "408h0m0s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not say %q (the DLQ retention, and the minimum: DLQ + topic retention)", err, want)
		}
	}
	cfg.Retention = cfg.DLQRetention // as long as the DLQ: accepted
	if err := h.New(t, cfg); err != nil {
		t.Fatalf("retention = DLQ retention: %v, want accepted", err)
	}
	cfg.Retention, cfg.PruneBatch = 0, 0
	err = h.New(t, cfg)
	if !errors.Is(err, platform.ErrInvalidInboxConfig) || !strings.Contains(err.Error(), "retention") || !strings.Contains(err.Error(), "prune_batch") {
		t.Fatalf("zero retention and prune batch: %v, want both named", err)
	}
}

func testPrune[Tx any](t *testing.T, h Harness[Tx]) {
	ctx := context.Background()
	cfg := defaultConfig("c1")
	cfg.PruneBatch = 3
	b := h.Open(t, cfg)
	var old []string
	for i := range 10 {
		id := fmt.Sprintf("old-%d", i)
		old = append(old, id)
		process(t, b, NewMsg(id), "old")
	}
	time.Sleep(5 * time.Millisecond)
	cut := time.Now()
	time.Sleep(5 * time.Millisecond)
	process(t, b, NewMsg("new-0"), "new")

	// Deliveries go on while pruning runs.
	const more = 40
	done := make(chan error, 1)
	go func() {
		for i := range more {
			out, err := b.Inbox.Process(ctx, NewMsg(fmt.Sprintf("more-%d", i)), func(tx Tx) error { return b.Write(tx, "more") })
			if err == nil && out != platform.InboxProcessed {
				err = fmt.Errorf("more-%d: %v, want processed", i, out)
			}
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	n, err := b.PruneBefore(ctx, cut)
	if err != nil || n != len(old) {
		t.Fatalf("PruneBefore(cut): %d, %v; want the %d older rows (in batches of 3)", n, err, len(old))
	}
	if err := <-done; err != nil {
		t.Fatalf("processing during the prune: %v", err)
	}
	for _, id := range old {
		if seen(t, b, id) {
			t.Fatalf("%s still recorded after the prune", id)
		}
	}
	if !seen(t, b, "new-0") || !seen(t, b, "more-0") || !seen(t, b, fmt.Sprintf("more-%d", more-1)) {
		t.Fatal("a row newer than the cutoff was pruned")
	}
	if c := b.Count(t, "more"); c != more {
		t.Fatalf("effects during the prune: %d, want %d", c, more)
	}
	if n, err := b.PruneBefore(ctx, cut); err != nil || n != 0 {
		t.Fatalf("second PruneBefore(cut): %d, %v; want 0", n, err)
	}
	if n, err := b.Prune(ctx); err != nil || n != 0 {
		t.Fatalf("Prune at the retention: %d, %v; want 0 (every row is recent)", n, err)
	}
	// A pruned event is new again (why the retention must cover every
	// redelivery path).
	if out := process(t, b, NewMsg("old-0"), "old"); out != platform.InboxProcessed {
		t.Fatalf("a pruned event delivered again: %v, want processed", out)
	}
}

func testIfNewer[Tx any](t *testing.T, h Harness[Tx]) {
	ctx := context.Background()
	b := h.Open(t, defaultConfig("c1"))
	steps := []struct {
		version int64
		apply   bool
	}{{5, true}, {3, false}, {5, false}, {7, true}, {6, false}}
	for i, s := range steps {
		m := NewMsg(fmt.Sprintf("upd-%d", i))
		var applied bool
		out, err := b.Inbox.Process(ctx, m, func(tx Tx) error {
			ok, err := b.IfNewer(ctx, tx, "order:1", s.version)
			if err != nil || !ok {
				return err
			}
			applied = true
			return b.Write(tx, fmt.Sprintf("order:1@%d", s.version))
		})
		if err != nil || out != platform.InboxProcessed {
			t.Fatalf("version %d: %v, %v; want processed", s.version, out, err)
		}
		if applied != s.apply {
			t.Fatalf("version %d after %v: applied %v, want %v", s.version, steps[:i], applied, s.apply)
		}
	}
	for _, v := range []int64{3, 5, 6, 7} {
		want := 0
		if v == 5 || v == 7 {
			want = 1
		}
		if c := b.Count(t, fmt.Sprintf("order:1@%d", v)); c != want {
			t.Fatalf("order:1 version %d applied %d times, want %d", v, c, want)
		}
	}
	// Another entity is independent.
	out, err := b.Inbox.Process(ctx, NewMsg("other"), func(tx Tx) error {
		ok, err := b.IfNewer(ctx, tx, "order:2", 1)
		if err == nil && !ok {
			err = errors.New("order:2 version 1 not applied")
		}
		return err
	})
	if err != nil || out != platform.InboxProcessed {
		t.Fatalf("another entity: %v, %v", out, err)
	}
}

// processBatch runs b.ProcessBatch over msgs with an effect that writes
// each message's event id and then fails for the event id fail.
func processBatch[Tx any](t *testing.T, b *Backend[Tx], msgs []*Msg, fail string) ([]platform.InboxOutcome, []error) {
	t.Helper()
	ims := make([]platform.InboxMsg, len(msgs))
	for i, m := range msgs {
		ims[i] = m
	}
	outs, errs, err := b.ProcessBatch(context.Background(), ims, func(tx Tx, m platform.InboxMsg) error {
		id, _ := platform.EventIDOf(m)
		if err := b.Write(tx, id); err != nil {
			return err
		}
		if id == fail {
			return errBoom
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return outs, errs
}

func testBatch[Tx any](t *testing.T, h Harness[Tx]) {
	b := h.Open(t, defaultConfig("c1"))
	if b.ProcessBatch == nil {
		t.Skip("the backend has no ProcessBatch")
	}
	process(t, b, NewMsg("old"), "old")
	// No effect fails: every message succeeds or is a repeat, and is acked.
	clean := []*Msg{NewMsg("x"), NewMsg("y"), NewMsg("x"), NewMsg("old"), NewMsg("z")}
	outs, errs := processBatch(t, b, clean, "")
	want := []platform.InboxOutcome{platform.InboxProcessed, platform.InboxProcessed, platform.InboxDuplicate, platform.InboxDuplicate, platform.InboxProcessed}
	for i, m := range clean {
		if outs[i] != want[i] || errs[i] != nil || m.Acks() != 1 {
			t.Errorf("clean batch, message %d: %v, %v, %d acks; want %v, no error, 1 ack", i, outs[i], errs[i], m.Acks(), want[i])
		}
	}
	// One effect fails: only its message fails.
	msgs := []*Msg{NewMsg("a"), NewMsg("bad"), NewMsg("a"), NewMsg("old"), NewMsg("c")}
	outs, errs = processBatch(t, b, msgs, "bad")
	want = []platform.InboxOutcome{platform.InboxProcessed, 0, platform.InboxDuplicate, platform.InboxDuplicate, platform.InboxProcessed}
	for i := range msgs {
		if outs[i] != want[i] {
			t.Errorf("message %d: %v, want %v", i, outs[i], want[i])
		}
		wantAcks := 1
		if i == 1 {
			wantAcks = 0
		}
		if msgs[i].Acks() != wantAcks {
			t.Errorf("message %d: %d acks, want %d", i, msgs[i].Acks(), wantAcks)
		}
	}
	if !errors.Is(errs[1], errBoom) || seen(t, b, "bad") || b.Count(t, "bad") != 0 {
		t.Errorf("failed message: err %v, row %v, effects %d; want the error, no row, no effect", errs[1], seen(t, b, "bad"), b.Count(t, "bad"))
	}
	for _, id := range []string{"a", "c", "old", "x", "y", "z"} {
		if c := b.Count(t, id); c != 1 || !seen(t, b, id) {
			t.Errorf("effects of %s: %d, row %v; want 1 and a row", id, c, seen(t, b, id))
		}
	}
}
