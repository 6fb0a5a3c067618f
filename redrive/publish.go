package redrive

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/jserr"
	"github.com/msgplatform/platform/internal/retry"
	"github.com/msgplatform/platform/internal/wire"
)

// The send path's publishes and their acks. A run publishes its events
// on core NATS with a reply subject of its own (<inbox>.<token>, one
// wildcard subscription per run) and the broker's acks are delivered
// straight into a channel that the acker reads: no future, no shared
// pending map and no goroutine hand-off per event, as jetstream's
// PublishMsgAsync has; and a PubAck is read by a small parser, with
// encoding/json for anything it does not recognize. What an ack means is
// unchanged: the acker waits for the acks in the order of the publishes,
// a publish that failed or went unanswered is sent again with the same
// Nats-Msg-Id (jetstream's PublishMsg, see await), and a refusal
// (an API error) is final. The inbox is the connection's (NewInbox: a
// tenant user's custom inbox prefix holds).
type publisher struct {
	nc     *nats.Conn
	wc     *wire.Conn // publishes go here if set (wirepath.go)
	reply  []byte     // the wire publish's reply subject, reused
	prefix string     // the reply subjects' prefix, <inbox>.
	sub    *nats.Subscription
	acks   chan *nats.Msg
	next   uint64 // the token of the next publish (the sender's)
	// early holds acks read while waiting for an earlier one (the
	// acker's): events to different streams are acknowledged by
	// different leaders, in any order.
	early map[uint64]*nats.Msg
	timer *time.Timer
}

var errNoAck = errors.New("no ack within 5s")

// ackTimeout is how long the acker waits for an ack before publishing the
// event again (with the same id).
const ackTimeout = 5 * time.Second

// newPublisher subscribes to the run's reply subjects. window bounds the
// publishes awaiting their ack; the channel holds twice as many, so the
// connection never drops an ack as a slow consumer.
func newPublisher(nc *nats.Conn, wc *wire.Conn, window int) (*publisher, error) {
	p := &publisher{nc: nc, wc: wc, prefix: nc.NewInbox() + ".", acks: make(chan *nats.Msg, 2*window+64), early: map[uint64]*nats.Msg{}}
	sub, err := nc.ChanSubscribe(p.prefix+"*", p.acks)
	if err != nil {
		return nil, fmt.Errorf("redrive: subscribe to acks: %w", err)
	}
	p.sub = sub
	return p, nil
}

// close unsubscribes; acks still in flight are dropped.
func (p *publisher) close() {
	if p != nil && p.sub != nil {
		_ = p.sub.Unsubscribe()
	}
}

// publish sends an event (its header block carries its Nats-Msg-Id) and
// returns the token of its ack. On the wire connection it is buffered
// until flush (or the buffer fills); while that connection is down, the
// event goes through nats.go.
func (p *publisher) publish(subject string, hdr, data []byte) (uint64, error) {
	tok := p.next
	if p.wc != nil {
		p.reply = strconv.AppendUint(append(p.reply[:0], p.prefix...), tok, 10)
		if p.wc.Publish(subject, nil, p.reply, hdr, data) == nil {
			p.next++
			return tok, nil
		}
	}
	// No wire connection, or it is down: nats.go's (which buffers while
	// it reconnects).
	m, err := natsMsg(subject, hdr, data)
	if err != nil {
		return 0, err
	}
	m.Reply = p.prefix + strconv.FormatUint(tok, 10)
	if err := p.nc.PublishMsg(m); err != nil {
		return 0, err
	}
	p.next++
	return tok, nil
}

// flush writes the buffered publishes (wire); nats.go flushes by itself.
func (p *publisher) flush() {
	if p.wc != nil {
		_ = p.wc.Flush()
	}
}

// wait returns the ack of the publish with token tok: the broker's reply
// (not yet parsed), errNoAck once deadline (its publish's time plus
// ackTimeout) has passed, or ctx's error. The deadline counts from the
// publish, not from the wait: when a connection dies with a window of
// publishes in flight, their acks are all lost, and each is given up on
// at its own deadline, not ackTimeout after the one before. Acks of
// earlier tokens that come late (their events were published again) are
// dropped; acks of later ones are kept for their turn.
func (p *publisher) wait(ctx context.Context, tok uint64, deadline time.Time) (*nats.Msg, error) {
	if m, ok := p.early[tok]; ok {
		delete(p.early, tok)
		return m, nil
	}
	for armed := false; ; {
		var m *nats.Msg
		select {
		case m = <-p.acks:
		default:
			if !armed {
				if p.timer == nil {
					p.timer = time.NewTimer(time.Until(deadline))
				} else {
					p.timer.Reset(time.Until(deadline))
				}
				armed = true
			}
			select {
			case m = <-p.acks:
			case <-p.timer.C:
				return nil, errNoAck
			case <-ctx.Done():
				p.timer.Stop()
				return nil, ctx.Err()
			}
		}
		t, err := strconv.ParseUint(m.Subject[min(len(p.prefix), len(m.Subject)):], 10, 64)
		switch {
		case err != nil || t < tok:
			continue // not ours, or late
		case t > tok:
			p.early[t] = m
			continue
		}
		if armed {
			p.timer.Stop()
		}
		return m, nil
	}
}

// acker waits for the pipeline's acks in order and hands each
// acknowledged (or skipped) item to the deleter, which settles it.
func (rn *runner) acker(ctx context.Context) {
	defer rn.del.close()
	for it := range rn.items {
		if !it.skip {
			ack, err := rn.await(ctx, it)
			if err != nil {
				rn.fail(err)
				for range rn.items { // drain: nothing after a failure counts
				}
				return
			}
			it.link.Stream, it.link.Seq, it.link.Duplicate = ack.Stream, ack.Sequence, ack.Duplicate
			rn.lastStream = ack.Stream
			rn.acked.Add(1)
			it.hdr, it.data = nil, nil // acknowledged: the deleter needs the link only
		}
		rn.del.add(it)
	}
}

// await waits for an item's ack; a publish that failed or went
// unanswered is sent again with the same id (the stream drops a stored
// repeat); a refusal is final.
func (rn *runner) await(ctx context.Context, it item) (*jetstream.PubAck, error) {
	m, err := rn.pub.wait(ctx, it.tok, it.at.Add(ackTimeout))
	if err == nil {
		var ack *jetstream.PubAck
		if ack, err = parsePubAck(m, rn.lastStream); err == nil {
			return ack, nil
		}
	} else if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	for attempt := 0; ; attempt++ {
		if _, refused := jserr.Code(err); refused || attempt >= 4 || ctx.Err() != nil {
			return nil, fmt.Errorf("redrive: publish DLQ entry %d to %s (id %s): %w", it.link.DLQSeq, it.link.Subject, it.link.MsgID, err)
		}
		if attempt > 0 || !errors.Is(err, errNoAck) { // unanswered: sent again at once
			retry.Sleep(ctx, time.Duration(200<<attempt)*time.Millisecond)
		}
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var ack *jetstream.PubAck
		var m *nats.Msg
		if m, err = natsMsg(it.link.Subject, it.hdr, it.data); err == nil {
			ack, err = rn.s.js.PublishMsg(actx, m, jetstream.WithMsgID(it.link.MsgID))
		}
		cancel()
		if err == nil {
			return ack, nil
		}
	}
}

// parsePubAck reads the broker's reply to a publish as jetstream's
// PublishMsgAsync does: no responders (no stream takes the subject) is
// jetstream.ErrNoStreamResponse; an error response is its
// *jetstream.APIError; a reply that is neither an error nor a PubAck
// naming its stream is jetstream.ErrInvalidJSAck. last is the stream
// name of the previous ack, reused to spare an allocation.
func parsePubAck(m *nats.Msg, last string) (*jetstream.PubAck, error) {
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		return nil, jetstream.ErrNoStreamResponse
	}
	if ack, ok := fastPubAck(m.Data, last); ok {
		return ack, nil
	}
	var pa struct {
		Error *jetstream.APIError `json:"error,omitempty"`
		*jetstream.PubAck
	}
	if err := json.Unmarshal(m.Data, &pa); err != nil {
		return nil, jetstream.ErrInvalidJSAck
	}
	if pa.Error != nil {
		return nil, pa.Error
	}
	if pa.PubAck == nil || pa.PubAck.Stream == "" {
		return nil, jetstream.ErrInvalidJSAck
	}
	return pa.PubAck, nil
}

// fastPubAck parses the shapes of a PubAck the broker writes from its
// template, {"stream":"S","seq":N} or {"stream":"S","domain":"D","seq":N},
// either possibly ending in ,"duplicate": true (with or without the
// space), and nothing else: ok false sends the reply to encoding/json.
func fastPubAck(b []byte, last string) (*jetstream.PubAck, bool) {
	str := func(b []byte, key string) (string, []byte, bool) {
		rest, ok := bytes.CutPrefix(b, []byte(key))
		if !ok {
			return "", b, false
		}
		q := bytes.IndexByte(rest, '"')
		if q < 0 || bytes.IndexByte(rest[:q], '\\') >= 0 {
			return "", b, false
		}
		return string(rest[:q]), rest[q+1:], true
	}
	ack := &jetstream.PubAck{}
	rest, ok := bytes.CutPrefix(b, []byte(`{"stream":"`))
	if !ok {
		return nil, false
	}
	q := bytes.IndexByte(rest, '"')
	if q <= 0 || bytes.IndexByte(rest[:q], '\\') >= 0 {
		return nil, false
	}
	if name := rest[:q]; string(name) == last {
		ack.Stream = last
	} else {
		ack.Stream = string(name)
	}
	b = rest[q+1:]
	if d, rest, ok := str(b, `,"domain":"`); ok {
		ack.Domain, b = d, rest
	}
	if b, ok = bytes.CutPrefix(b, []byte(`,"seq":`)); !ok {
		return nil, false
	}
	n := 0
	for n < len(b) && b[n] >= '0' && b[n] <= '9' {
		n++
	}
	v, err := strconv.ParseUint(string(b[:n]), 10, 64)
	if n == 0 || err != nil {
		return nil, false
	}
	ack.Sequence, b = v, b[n:]
	for _, dup := range []string{`,"duplicate": true`, `,"duplicate":true`} {
		if rest, ok := bytes.CutPrefix(b, []byte(dup)); ok {
			ack.Duplicate, b = true, rest
			break
		}
	}
	if string(b) != "}" {
		return nil, false
	}
	return ack, true
}
