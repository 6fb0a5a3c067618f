package redrive

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/jspull"
	"github.com/msgplatform/platform/internal/wire"
)

// The runs' hot path over internal/wire. A service opens one connection
// for its runs (shared, open while a run is) with the credentials of its
// own (the same user, so the same account and permissions); on it, a run
// reads the DLQ through a pull consumer and publishes the redriven
// events: a DLQ entry's header block stays bytes from the read to the
// publish (filtered line by line), where nats.go would decode it into a
// map per entry, then the run's copy of it again, and encode it for the
// publish. The acks still come back on the service's nats.go connection
// (the reply subject is its inbox).
//
// Where wire cannot connect as the service does (TLS, user and password,
// a token, an nkey without a JWT, a custom dialer, a JetStream API prefix
// or domain), or the server refuses another connection (a tenant at its
// connection limit), a run reads through nats.go's ordered consumer and
// publishes through nats.go instead; what it sends is the same.

// apiPrefixOf is the JetStream API subject prefix js uses, with its dot.
func apiPrefixOf(js jetstream.JetStream) string {
	if p := js.Options().APIPrefix; p != "" {
		return strings.TrimSuffix(p, ".") + "."
	}
	return jetstream.DefaultAPIPrefix
}

// newJetStream is jetstream.New, with an API prefix when one is named.
func newJetStream(nc *nats.Conn, prefix string) (jetstream.JetStream, error) {
	if prefix == "" {
		return jetstream.New(nc)
	}
	return jetstream.NewWithAPIPrefix(nc, prefix)
}

// errNoWire: the service's connection uses something wire does not speak.
var errNoWire = errors.New("redrive: the connection's options need nats.go")

// dialWire opens a wire connection as js's is connected, named after it.
func dialWire(js jetstream.JetStream) (*wire.Conn, error) {
	if js.Options().Domain != "" {
		return nil, errNoWire
	}
	nc := js.Conn()
	o := nc.Opts
	if o.Secure || o.TLSConfig != nil || o.TLSHandshakeFirst || o.User != "" || o.Password != "" || o.Token != "" ||
		o.TokenHandler != nil || o.Nkey != "" || o.CustomDialer != nil || o.ProxyPath != "" || (o.UserJWT == nil) != (o.SignatureCB == nil) {
		return nil, errNoWire
	}
	var urls []string
	if u := nc.ConnectedUrl(); u != "" {
		urls = append(urls, u)
	}
	for _, u := range nc.Servers() {
		if u != "" && !slices.Contains(urls, u) {
			urls = append(urls, u)
		}
	}
	for _, u := range urls {
		if strings.Contains(u, "@") || !(strings.HasPrefix(u, "nats://") || !strings.Contains(u, "://")) {
			return nil, errNoWire // credentials in the URL, or not plain TCP
		}
	}
	if len(urls) == 0 {
		return nil, errNoWire
	}
	name := o.Name
	if name == "" {
		name = "platform"
	}
	return wire.Dial(wire.Options{URLs: urls, UserJWT: o.UserJWT, Sign: o.SignatureCB, Name: name + " (redrive runs)", Timeout: 5 * time.Second})
}

// acquireWire returns the runs' shared connection, opening it if no run
// holds it, or nil (the run uses nats.go): wire cannot connect as the
// service does, or the dial failed (then not tried again for a few
// seconds). Every non-nil return is matched by a releaseWire.
func (s *Service) acquireWire() *wire.Conn {
	if s.cfg.noWire {
		return nil
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.wc == nil {
		if time.Now().Before(s.wretryAt) {
			return nil
		}
		wc, err := dialWire(s.js)
		if err != nil {
			if !errors.Is(err, errNoWire) {
				s.wretryAt = time.Now().Add(5 * time.Second)
				s.log.Warn("redrive: no connection of its own for runs; they read and publish through the service's", "err", err)
			}
			return nil
		}
		s.wc = wc
		if s.cfg.OwnConn != nil {
			s.wclosed = s.cfg.OwnConn()
		}
	}
	s.wrefs++
	return s.wc
}

// releaseWire closes the shared connection when the last run holding it
// lets go.
func (s *Service) releaseWire() {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.wrefs--; s.wrefs > 0 || s.wc == nil {
		return
	}
	s.wc.Close()
	s.wc = nil
	if s.wclosed != nil {
		s.wclosed()
		s.wclosed = nil
	}
}

// delivery is one message of the wire consumer: an entry (status 0) or a
// status message of the pull requests.
type delivery struct {
	sseq, dseq, pending uint64
	status              int
	left                int // a 408's Nats-Pending-Messages
	e                   *rawEntry
}

// pullBatch is how many entries one pull request asks for; two are kept
// outstanding, so the consumer delivers while the run sends.
const pullBatch = 1024

// streamWire is stream over the run's wire connection: a pull consumer
// (AckNone, in memory, R1, as nats.go's ordered consumer) from the first
// frozen entry left, read with two pull requests outstanding. A gap in the
// delivery sequence, a status other than an expired request, a stall of a
// second or an overflow ends it: the caller goes on from the index
// returned.
func (rn *runner) streamWire(ctx context.Context, wc *wire.Conn, idx int, view *leaderView, emit func(fetched) bool) int {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	c, err := rn.dlq.CreateConsumer(cctx, jetstream.ConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: rn.seqs[idx],
		AckPolicy: jetstream.AckNonePolicy, MemoryStorage: true, Replicas: 1, InactiveThreshold: time.Minute,
		Description: "redrive " + rn.id,
	})
	cancel()
	if err != nil {
		rn.s.log.Debug("redrive: DLQ consumer", "request", rn.id, "err", err)
		return idx
	}
	name := c.CachedInfo().Name
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		_ = rn.dlq.DeleteConsumer(dctx, name)
		cancel()
	}()
	ch := make(chan delivery, 2*pullBatch+64)
	var overflow atomic.Bool
	inbox := rn.s.js.Conn().NewInbox()
	sid, err := wc.Subscribe(inbox, "", func(m *wire.Msg) {
		var d delivery
		if r, ok := bytes.CutPrefix(m.Reply, []byte("$JS.ACK.")); ok {
			var ok bool
			if d.sseq, d.dseq, d.pending, ok = jspull.ParseAckReply(r); !ok {
				d.status = -1
			} else {
				buf := make([]byte, len(m.Header)+len(m.Data))
				n := copy(buf, m.Header)
				copy(buf[n:], m.Data)
				d.e = &rawEntry{hdr: buf[:n:n], data: buf[n:]}
			}
		} else if d.status = jspull.StatusOf(m.Header); d.status == 0 {
			d.status = -1
		} else if d.status == jspull.Expired {
			d.left, _ = strconv.Atoi(headerValue(m.Header, jspull.PendingMessagesHeader))
		}
		select {
		case ch <- d:
		default:
			overflow.Store(true)
		}
	})
	if err != nil {
		return idx
	}
	defer func() { _ = wc.Unsubscribe(sid) }()
	next := jspull.NextSubject(apiPrefixOf(rn.s.js), rn.dlqName, name)
	req := jspull.Request{Batch: pullBatch, Expires: 5 * time.Second}.Body()
	outstanding := 0 // requested and not yet read
	pull := func() bool {
		if err := wc.Publish(next, nil, []byte(inbox), nil, req); err != nil {
			return false
		}
		outstanding += pullBatch
		return wc.Flush() == nil
	}
	// Two requests outstanding, so the server has the next batch to send
	// while this one is read.
	for range 2 {
		if !pull() {
			return idx
		}
	}
	timer := time.NewTimer(time.Second)
	defer timer.Stop()
	var lastD uint64
	for idx < len(rn.seqs) && ctx.Err() == nil {
		if overflow.Load() {
			return idx
		}
		var d delivery
		select {
		case d = <-ch:
		default:
			timer.Reset(time.Second)
			select {
			case d = <-ch:
			case <-timer.C:
				return idx
			case <-ctx.Done():
				return idx
			}
		}
		if d.status != 0 {
			switch d.status {
			case jspull.Heartbeat:
			case jspull.NoMessages, jspull.Expired: // a request ended with d.left undelivered
				outstanding = max(0, outstanding-d.left)
			default:
				return idx
			}
			if outstanding <= pullBatch && !pull() {
				return idx
			}
			continue
		}
		outstanding--
		if d.dseq != lastD+1 {
			return idx // a gap: missed deliveries
		}
		lastD = d.dseq
		if outstanding <= pullBatch && !pull() {
			return idx
		}
		var ok bool
		if idx, ok = rn.delivered(idx, d.sseq, d.pending, d.e, view, emit); !ok {
			return idx
		}
	}
	return idx
}
