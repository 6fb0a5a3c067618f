package platform

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"
)

type headerMsg nats.Header

func (h headerMsg) Headers() nats.Header { return nats.Header(h) }
func (h headerMsg) Ack() error           { return nil }

// A redriven copy has a new Nats-Msg-Id; the inbox must key on the
// original event id so a consumer that applied the event skips the copy.
func TestEventIDOfPrefersTheOriginalIDOfARedrivenCopy(t *testing.T) {
	orig := headerMsg{"Nats-Msg-Id": {"evt-HC2048-01"}}
	copy := headerMsg{"Nats-Msg-Id": {"redrive:r1:42"}, OriginalMsgIDHeader: {"evt-HC2048-01"}}
	a, err1 := EventIDOf(orig)
	b, err2 := EventIDOf(copy)
	if err1 != nil || err2 != nil || a != b || a != "evt-HC2048-01" {
		t.Fatalf("EventIDOf = %q,%v and %q,%v; want both evt-HC2048-01", a, err1, b, err2)
	}
	if _, err := EventIDOf(headerMsg{}); !errors.Is(err, ErrNoEventID) {
		t.Fatalf("no id: err = %v, want ErrNoEventID", err)
	}
}
