package redrive

import (
	"testing"

	"github.com/nats-io/nats.go"
)

// A redriven event names its request and DLQ entry by its id alone, on
// the topic (Nats-Msg-Id) and in a DLQ again (Platform-Event-Id); events
// redriven by earlier versions by two headers.
func TestRedriveOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    nats.Header
		req  string
		seq  uint64
		ok   bool
	}{
		{"on the topic", nats.Header{nats.MsgIdHdr: {MsgID("rd-20261130-020259-ac0534", 42)}}, "rd-20261130-020259-ac0534", 42, true},
		{"in a DLQ", nats.Header{headerEventID: {MsgID("rd-1", 7)}}, "rd-1", 7, true},
		{"request id with colons", nats.Header{nats.MsgIdHdr: {"redrive:a:b:9"}}, "a:b", 9, true},
		{"legacy headers", nats.Header{HeaderRequest: {"rd-old"}, HeaderDLQSeq: {"5"}, nats.MsgIdHdr: {"redrive:rd-new:6"}}, "rd-old", 5, true},
		{"a publisher's id", nats.Header{nats.MsgIdHdr: {"order-1"}}, "", 0, false},
		{"no id", nats.Header{}, "", 0, false},
		{"no sequence", nats.Header{nats.MsgIdHdr: {"redrive:rd-1"}}, "", 0, false},
		{"bad sequence", nats.Header{nats.MsgIdHdr: {"redrive:rd-1:x"}}, "", 0, false},
		{"empty request", nats.Header{nats.MsgIdHdr: {"redrive::3"}}, "", 0, false},
	} {
		req, seq, ok := RedriveOf(tc.h)
		if req != tc.req || seq != tc.seq || ok != tc.ok {
			t.Errorf("%s: RedriveOf = %q %d %v, want %q %d %v", tc.name, req, seq, ok, tc.req, tc.seq, tc.ok)
		}
	}
}
