package redrive

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Every reply the broker can send to a publish reads as jetstream's
// PublishMsgAsync would read it: the template shapes by the fast parser,
// anything else through encoding/json.
func TestParsePubAck(t *testing.T) {
	t.Parallel()
	ok := func(stream string, seq uint64, dup bool, domain string) *jetstream.PubAck {
		return &jetstream.PubAck{Stream: stream, Sequence: seq, Duplicate: dup, Domain: domain}
	}
	for _, c := range []struct {
		data string
		want *jetstream.PubAck
		fast bool
	}{
		{`{"stream":"orders","seq":42}`, ok("orders", 42, false, ""), true},
		{`{"stream":"orders","seq":42,"duplicate": true}`, ok("orders", 42, true, ""), true},
		{`{"stream":"orders","seq":42,"duplicate":true}`, ok("orders", 42, true, ""), true},
		{`{"stream":"orders","domain":"hub","seq":7}`, ok("orders", 7, false, "hub"), true},
		{`{"stream":"orders","domain":"hub","seq":7,"duplicate": true}`, ok("orders", 7, true, "hub"), true},
		// Not the template: encoding/json reads them.
		{`{"stream":"orders","seq":42,"batch":"b1","count":3}`, ok("orders", 42, false, ""), false},
		{`{"stream":"orders","seq":42,"val":"1"}`, &jetstream.PubAck{Stream: "orders", Sequence: 42, Value: "1"}, false},
		{`{ "stream": "orders", "seq": 42 }`, ok("orders", 42, false, ""), false},
		{`{"stream":"or\"ders","seq":42}`, ok(`or"ders`, 42, false, ""), false},
		{`{"stream":"orders","seq":18446744073709551615}`, ok("orders", 18446744073709551615, false, ""), true},
	} {
		got, err := parsePubAck(&nats.Msg{Data: []byte(c.data)}, "orders")
		if err != nil || *got != *c.want {
			t.Errorf("%s: got %+v, %v; want %+v", c.data, got, err, c.want)
		}
		if _, fast := fastPubAck([]byte(c.data), ""); fast != c.fast {
			t.Errorf("%s: fast path %v, want %v", c.data, fast, c.fast)
		}
	}
	// Refusals are API errors (final for the acker); the rest are not.
	var apiErr *jetstream.APIError
	_, err := parsePubAck(&nats.Msg{Data: []byte(`{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"},"stream":"orders","seq":0}`)}, "")
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != 10077 {
		t.Errorf("error reply: %v, want the APIError 10077", err)
	}
	h := nats.Header{}
	h.Set("Status", "503")
	if _, err := parsePubAck(&nats.Msg{Header: h}, ""); !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Errorf("no responders: %v, want ErrNoStreamResponse", err)
	}
	for _, bad := range []string{``, `{}`, `{"stream":"","seq":1}`, `not json`, `{"stream":"orders","seq":}`} {
		if _, err := parsePubAck(&nats.Msg{Data: []byte(bad)}, ""); !errors.Is(err, jetstream.ErrInvalidJSAck) {
			t.Errorf("%q: %v, want ErrInvalidJSAck", bad, err)
		}
	}
}

// The acker gets each publish's own ack whatever order the acks arrive
// in; a late ack (its event was published again) is dropped, and an ack
// that never comes times out.
func TestPublisherWaitMatchesAcksToPublishes(t *testing.T) {
	t.Parallel()
	p := &publisher{prefix: "_INBOX.x.", acks: make(chan *nats.Msg, 16), early: map[uint64]*nats.Msg{}}
	ack := func(subject string, seq string) *nats.Msg {
		return &nats.Msg{Subject: subject, Data: []byte(`{"stream":"s","seq":` + seq + `}`)}
	}
	p.acks <- ack("_INBOX.x.0", "10")
	p.acks <- ack("_INBOX.x.2", "12") // early
	p.acks <- ack("_INBOX.x.1", "11")
	p.acks <- ack("_INBOX.other", "99") // not a token
	p.acks <- ack("_INBOX.x.1", "11")   // late repeat
	p.acks <- ack("_INBOX.x.3", "13")
	ctx := context.Background()
	for tok, want := range []string{"10", "11", "12", "13"} {
		m, err := p.wait(ctx, uint64(tok), time.Now().Add(time.Minute))
		if err != nil {
			t.Fatalf("token %d: %v", tok, err)
		}
		a, err := parsePubAck(m, "")
		if err != nil || a.Sequence != map[string]uint64{"10": 10, "11": 11, "12": 12, "13": 13}[want] {
			t.Fatalf("token %d: ack %+v (%v), want seq %s", tok, a, err, want)
		}
	}
	if len(p.early) != 0 {
		t.Errorf("%d acks left over", len(p.early))
	}
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := p.wait(cctx, 4, time.Now().Add(time.Minute)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("no ack: %v, want the context's deadline", err)
	}
	// A publish whose deadline has passed (published ackTimeout ago, its
	// connection gone since) is given up on at once.
	start := time.Now()
	if _, err := p.wait(ctx, 5, start.Add(-time.Second)); !errors.Is(err, errNoAck) || time.Since(start) > time.Second {
		t.Errorf("past deadline: %v after %s, want errNoAck at once", err, time.Since(start))
	}
}

// What the leader said is gone is gone: below its first entry, or among
// its deleted ones.
func TestLeaderViewGone(t *testing.T) {
	t.Parallel()
	v := &leaderView{first: 10, deleted: []uint64{12, 15, 40}}
	for seq, want := range map[uint64]bool{1: true, 9: true, 10: false, 11: false, 12: true, 15: true, 16: false, 40: true, 41: false} {
		if got := v.gone(seq); got != want {
			t.Errorf("gone(%d) = %v, want %v", seq, got, want)
		}
	}
}
