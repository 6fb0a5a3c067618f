package redrive

import (
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/dlq"
)

// A header block is read as nats.go reads it: the first value of a key,
// trimmed, keys as written; the status line is skipped.
func TestHeaderBlockHelpers(t *testing.T) {
	t.Parallel()
	hdr := []byte("NATS/1.0\r\nA: 1\r\nB:  two  \r\nA: 3\r\nNats-Sequence: 42\r\nbad line\r\n\r\n")
	for key, want := range map[string]string{"A": "1", "B": "two", "Nats-Sequence": "42", "a": "", "C": ""} {
		if got := headerValue(hdr, key); got != want {
			t.Errorf("headerValue(%q) = %q, want %q", key, got, want)
		}
	}
	var keys []string
	headerLines(hdr, func(_, k, _ []byte) bool { keys = append(keys, string(k)); return true })
	if want := []string{"A", "B", "A", "Nats-Sequence"}; !reflect.DeepEqual(keys, want) {
		t.Errorf("lines %q, want %q", keys, want)
	}
	h := nats.Header{"B": {"x"}, "A": {"1", "2"}}
	enc := encodeHeader(h)
	if string(enc) != "NATS/1.0\r\nA: 1\r\nA: 2\r\nB: x\r\n\r\n" {
		t.Errorf("encodeHeader: %q", enc)
	}
	back, err := nats.DecodeHeadersMsg(enc)
	if err != nil || !reflect.DeepEqual(back, h) {
		t.Errorf("decoded %v (%v), want %v", back, err, h)
	}
	if encodeHeader(nil) != nil {
		t.Error("no header: want nil")
	}
}

// prepare, reading the entry's header block line by line, builds the
// event the map-based version did: every header the entry carried but
// the broker's, the DLQ writer's and an earlier redrive's, all values
// kept, then the id, the original id and the group.
func TestPrepareKeepsTheEntrysHeaders(t *testing.T) {
	t.Parallel()
	entry := nats.Header{
		"Platform-Tenant":        {"harbor-retail"},
		"Trace":                  {"a", "b"},
		"traceparent":            {"00-abc-01"},
		"Nats-Msg-Id":            {"evt-9"},
		"Nats-Expected-Stream":   {"x"},
		"Platform-Event-Id":      {"evt-9"},
		"Platform-Redrive-Group": {"stale"},
		HeaderDLQSeq:             {"3"},
		dlq.HeaderSubject:        {"orders.p.3.order:9"},
		dlq.HeaderGroup:          {"billing"},
		dlq.HeaderStream:         {"orders"},
		dlq.HeaderSeq:            {"77"},
		dlq.HeaderReason:         {"boom"},
	}
	rn := &runner{id: "r1", object: "orders", kind: "topic"}
	it := rn.prepare(fetched{idx: 0, seq: 12, e: &rawEntry{hdr: encodeHeader(entry), data: []byte("payload")}})
	if it.skip {
		t.Fatal("skipped")
	}
	got, err := nats.DecodeHeadersMsg(it.hdr)
	if err != nil {
		t.Fatal(err)
	}
	want := nats.Header{
		"Platform-Tenant": {"harbor-retail"}, "Trace": {"a", "b"}, "traceparent": {"00-abc-01"},
		"Nats-Msg-Id": {"redrive:r1:12"}, HeaderOriginalMsgID: {"evt-9"}, HeaderForGroup: {"billing"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("headers\n got %v\nwant %v", got, want)
	}
	if string(it.data) != "payload" || it.link.OrigSeq != 77 || it.link.OrigStream != "orders" || it.link.OriginalID != "evt-9" || it.link.MsgID != "redrive:r1:12" {
		t.Errorf("item %+v", it)
	}
	// An earlier redrive's original id wins over the event id.
	entry[HeaderOriginalMsgID] = []string{"evt-1"}
	it = rn.prepare(fetched{seq: 13, e: &rawEntry{hdr: encodeHeader(entry)}})
	if got, _ := nats.DecodeHeadersMsg(it.hdr); got.Get(HeaderOriginalMsgID) != "evt-1" || len(got[HeaderOriginalMsgID]) != 1 {
		t.Errorf("original id %v", got[HeaderOriginalMsgID])
	}
	// A short entry whose block cannot hold the redrive's headers (built
	// in place otherwise): the same headers, in a new block.
	short := nats.Header{dlq.HeaderSubject: {"orders.p.3.order:9"}, dlq.HeaderGroup: {"g"}, "Platform-Event-Id": {"e"}}
	it = rn.prepare(fetched{seq: 14, e: &rawEntry{hdr: encodeHeader(short)}})
	if got, err := nats.DecodeHeadersMsg(it.hdr); err != nil || !reflect.DeepEqual(got, nats.Header{
		"Nats-Msg-Id": {"redrive:r1:14"}, HeaderOriginalMsgID: {"e"}, HeaderForGroup: {"g"}}) {
		t.Errorf("short entry: %v (%v)", got, err)
	}
	// Gone: nothing sent.
	if it := rn.prepare(fetched{seq: 15}); !it.skip || !it.gone {
		t.Errorf("gone entry: %+v", it)
	}
}

// A run reads and publishes over a connection of its own where it can,
// and through nats.go where it cannot: the events are the same either
// way, and the connection is counted while the run holds it.
func TestRunOverItsOwnConnectionOrNatsGo(t *testing.T) {
	t.Parallel()
	events := map[bool]map[uint64]nats.Header{}
	for _, noWire := range []bool{false, true} {
		e := newEnv(t, topic("orders", "checkout", ""))
		e.deadLetter("orders", "billing", 0, 300, permanent("declined %d"))
		var opened, open atomic.Int32
		s := e.service(func(c *Config) {
			c.noWire = noWire
			c.OwnConn = func() func() {
				opened.Add(1)
				open.Add(1)
				return func() { open.Add(-1) }
			}
		})
		ctx := natstest.Context(t, 60*time.Second)
		st := startRun(t, ctx, s, req("orders", "alice", Selection{All: true}))
		done := waitState(t, s, st.ID, StateCompleted, 30*time.Second)
		if done.Progress.Sent != 300 {
			t.Fatalf("noWire=%v: %d sent, want 300", noWire, done.Progress.Sent)
		}
		natstest.WaitFor(t, 5*time.Second, func() error {
			if n := open.Load(); n != 0 {
				return fmt.Errorf("%d own connections still open after the run", n)
			}
			return nil
		})
		if want := map[bool]int32{false: 1, true: 0}[noWire]; opened.Load() != want {
			t.Errorf("noWire=%v: own connection opened %d times, want %d", noWire, opened.Load(), want)
		}
		got := map[uint64]nats.Header{}
		for _, m := range e.redriven("orders", st.ID) {
			_, seq, _ := RedriveOf(m.Header)
			h := nats.Header{}
			for k, v := range m.Header {
				if k != nats.MsgIdHdr {
					h[k] = v
				}
			}
			h["Data"] = []string{string(m.Data)}
			got[seq] = h
		}
		if len(got) != 300 {
			t.Fatalf("noWire=%v: %d events stored, want 300", noWire, len(got))
		}
		events[noWire] = got
	}
	if !reflect.DeepEqual(events[false], events[true]) {
		seqs := make([]uint64, 0, len(events[false]))
		for s := range events[false] {
			seqs = append(seqs, s)
		}
		sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
		s := seqs[0]
		t.Errorf("the events differ, e.g. entry %d:\nwire   %v\nnats.go %v", s, events[false][s], events[true][s])
	}
}

// The node the run's connection is on dies mid-run: the run goes on over
// another node, and every entry is redriven exactly once (a publish the
// dead connection never delivered, or whose ack it lost, is sent again
// with the same id, which the stream drops if it has it).
func TestRunSurvivesItsNodeKilled(t *testing.T) {
	t.Parallel()
	ts := topic("orders", "checkout", "")
	ts.Replicas = 3
	e := newEnvNodes(t, 3, ts)
	f, js := e.f, e.js
	const n = 3000
	e.deadLetter("orders", "billing", 0, n, permanent("declined %d"))
	node := -1
	for i := range 3 {
		if f.Node(i).Name() == js.Conn().ConnectedServerName() {
			node = i
		}
	}
	if node < 0 {
		t.Fatalf("connected to %s, not a node of the fabric", js.Conn().ConnectedServerName())
	}
	var killed atomic.Bool
	var opened atomic.Int32
	logger := natstest.LogOnFailure(t, slog.LevelDebug, "service log")
	s := e.service(func(c *Config) {
		c.Replicas = 3 // the requests' bucket and the audit stream survive the node
		c.Logger = logger
		c.OwnConn = func() func() { opened.Add(1); return func() {} }
		c.afterSend = func(next int) error {
			if next == n/3 && !killed.Swap(true) {
				f.Kill(node)
			}
			return nil
		}
	})
	t.Cleanup(func() { // before the service closes
		if t.Failed() {
			buf := make([]byte, 1<<20)
			t.Logf("goroutines:\n%s", buf[:runtime.Stack(buf, true)])
		}
	})
	ctx := natstest.Context(t, 120*time.Second)
	r := req("orders", "alice", Selection{All: true})
	r.Rate = 2000
	st := startRun(t, ctx, s, r)
	done := waitState(t, s, st.ID, StateCompleted, 90*time.Second)
	if !killed.Load() || opened.Load() == 0 {
		t.Fatalf("node killed %v, own connection opened %d times: the test did not test", killed.Load(), opened.Load())
	}
	got := e.redriven("orders", st.ID)
	seen := map[uint64]int{}
	for _, m := range got {
		_, seq, _ := RedriveOf(m.Header)
		seen[seq]++
	}
	dups := 0
	for _, c := range seen {
		dups += c - 1
	}
	if len(seen) != n || dups != 0 || done.Progress.Sent != n {
		t.Fatalf("node %d killed at %d: %d entries redriven (%d stored twice), run says %d sent; want %d, 0", node, n/3, len(seen), dups, done.Progress.Sent, n)
	}
	if left := streamMsgs(t, ctx, js, platform.DLQStream("orders")); left != 0 {
		t.Errorf("%d entries left in the DLQ", left)
	}
	t.Logf("node %d killed after %d of %d sent: completed with %d sent, 0 lost, 0 stored twice", node, n/3, n, done.Progress.Sent)
}

// dialWire declines what it does not speak, so the run uses nats.go.
func TestDialWireDeclines(t *testing.T) {
	t.Parallel()
	f := natstest.RunFabric(t, 1)
	nc := f.Conn()
	js, err := jetstream.NewWithDomain(nc, "hub")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dialWire(js); !errors.Is(err, errNoWire) {
		t.Errorf("JetStream domain: %v, want errNoWire", err)
	}
	js, _ = jetstream.New(nc)
	wc, err := dialWire(js)
	if err != nil {
		t.Fatalf("admin connection: %v", err)
	}
	wc.Close()
}
