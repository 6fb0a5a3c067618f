package consumer

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/jspull"
	"github.com/msgplatform/platform/platform"
)

// pullInbox speaks the JetStream pull protocol itself, over one inbox
// for its whole life, so its owner decides when a request is sent and
// for how many messages, and knows when one has ended. nats.go's Fetch
// gives up on a request's inbox a second after the request's expiry, so
// a message the server serves to a request that reached it late goes to
// nobody and waits out its AckWait; its Consume sends a new request after
// a reconnect whatever the handler holds, so messages wait unseen in its
// buffer with their leases running. Here a late message still reaches
// the owner, and every message is seen at once.
type pullInbox struct {
	nc   *nats.Conn
	next string // the consumer's MSG.NEXT API subject
	sub  *nats.Subscription
	msgs chan *nats.Msg
}

// pullInboxSuffix ends every pullInbox's subject (an inbox of the
// connection's own prefix, so tenant users may subscribe to it), which
// tells them apart from nats.go's inboxes in a server's connection list.
const pullInboxSuffix = ".pull"

// pullBuffer bounds what the server can have sent a pullInbox and its
// owner not read yet: requests ask for at most this many.
const pullBuffer = 1024

func newPullInbox(js jetstream.JetStream, stream, consumer string) (*pullInbox, error) {
	nc := js.Conn()
	p := &pullInbox{nc: nc, next: platform.APIPrefix(js) + "CONSUMER.MSG.NEXT." + stream + "." + consumer,
		msgs: make(chan *nats.Msg, pullBuffer+64)}
	sub, err := nc.ChanSubscribe(nc.NewInbox()+pullInboxSuffix, p.msgs)
	if err != nil {
		return nil, err
	}
	p.sub = sub
	return p, nil
}

// request asks for up to req.Batch messages (at most pullBuffer), waiting
// at the server up to req.Expires, with a heartbeat every req.Heartbeat
// while it waits.
func (p *pullInbox) request(req jspull.Request) error {
	req.Batch = min(req.Batch, pullBuffer)
	return p.nc.PublishRequest(p.next, p.sub.Subject, req.Body())
}

func (p *pullInbox) close() { _ = p.sub.Unsubscribe() }

// pullStatus classifies a message on a pullInbox: a message of the
// stream (0), or a jspull status code (a heartbeat, or the end of a
// request) with its description.
func pullStatus(m *nats.Msg) (code int, desc string) {
	if len(m.Data) > 0 || m.Header == nil {
		return 0, ""
	}
	code, err := strconv.Atoi(m.Header.Get("Status"))
	if err != nil {
		return 0, ""
	}
	return code, m.Header.Get("Description")
}

// pulledMsg is a message a pullInbox received, as a jetstream.Msg: its
// reply subject is the consumer's ack subject.
type pulledMsg struct {
	nc  *nats.Conn
	msg *nats.Msg

	mu   sync.Mutex
	ackd bool
}

var _ jetstream.Msg = (*pulledMsg)(nil)

func (m *pulledMsg) Metadata() (*jetstream.MsgMetadata, error) {
	md, err := m.msg.Metadata()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", jetstream.ErrNotJSMessage, err)
	}
	out := &jetstream.MsgMetadata{NumDelivered: md.NumDelivered, NumPending: md.NumPending,
		Timestamp: md.Timestamp, Stream: md.Stream, Consumer: md.Consumer, Domain: md.Domain}
	out.Sequence.Stream, out.Sequence.Consumer = md.Sequence.Stream, md.Sequence.Consumer
	return out, nil
}

func (m *pulledMsg) Data() []byte         { return m.msg.Data }
func (m *pulledMsg) Headers() nats.Header { return m.msg.Header }
func (m *pulledMsg) Subject() string      { return m.msg.Subject }
func (m *pulledMsg) Reply() string        { return m.msg.Reply }

func (m *pulledMsg) Ack() error { return m.settle(context.Background(), "+ACK", false) }
func (m *pulledMsg) DoubleAck(ctx context.Context) error {
	return m.settle(ctx, "+ACK", true)
}
func (m *pulledMsg) Nak() error { return m.settle(context.Background(), "-NAK", false) }
func (m *pulledMsg) NakWithDelay(delay time.Duration) error {
	return m.settle(context.Background(), fmt.Sprintf(`-NAK {"delay": %d}`, delay.Nanoseconds()), false)
}
func (m *pulledMsg) InProgress() error { return m.settle(context.Background(), "+WPI", false) }
func (m *pulledMsg) Term() error       { return m.settle(context.Background(), "+TERM", false) }
func (m *pulledMsg) TermWithReason(reason string) error {
	return m.settle(context.Background(), "+TERM "+reason, false)
}

// settle sends body to the ack subject (sync: as a request, waiting for
// the server's reply). Once acked, naked or terminated, a message refuses
// another (jetstream.ErrMsgAlreadyAckd), as nats.go's do; progress can be
// sent any number of times.
func (m *pulledMsg) settle(ctx context.Context, body string, sync bool) error {
	if m.msg.Reply == "" {
		return jetstream.ErrMsgNoReply
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ackd {
		return jetstream.ErrMsgAlreadyAckd
	}
	nc := m.nc
	var err error
	if sync {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
		}
		_, err = nc.RequestWithContext(ctx, m.msg.Reply, []byte(body))
	} else {
		err = nc.Publish(m.msg.Reply, []byte(body))
	}
	if err == nil && body != "+WPI" {
		m.ackd = true
	}
	return err
}
