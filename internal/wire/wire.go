package wire

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nkeys"
)

var (
	// ErrDisconnected: the connection is down (it is reconnecting).
	ErrDisconnected = errors.New("wire: not connected")
	// ErrClosed: Close was called.
	ErrClosed = errors.New("wire: connection closed")
	// ErrMaxPayload: header and payload exceed the server's max_payload
	// (the server would close the connection for it).
	ErrMaxPayload = errors.New("wire: maximum payload exceeded")
)

// Msg is one delivered message. Its slices are valid during the
// callback only.
type Msg struct {
	Subject, Reply []byte
	// Header is the whole header block ("NATS/1.0\r\n...\r\n\r\n"), nil
	// if the message has none.
	Header []byte
	Data   []byte
}

// Handler is a subscription callback. It runs on the read loop: it must
// not block, and must not call Subscribe, Unsubscribe or Close.
type Handler func(*Msg)

// Options configure Dial.
type Options struct {
	// URLs are tried in turn, first to last, on connect and reconnect.
	URLs []string
	// JWT and Seed authenticate the user (operator mode).
	JWT  string
	Seed []byte
	// UserJWT and Sign, when JWT is empty, do the same through callbacks
	// (nats.go's Options.UserJWT and SignatureCB: a connection can be
	// opened with another connection's credentials).
	UserJWT func() (string, error)
	Sign    func(nonce []byte) ([]byte, error)
	Name    string
	// TLS, when set, is required: the connection upgrades to TLS after
	// the server's INFO (which must say tls_required) and refuses a
	// server that does not offer it. ServerName defaults to the host of
	// the URL dialled. nil: plain TCP, and a server that requires TLS is
	// refused.
	TLS *tls.Config
	// ReconnectWait is the pause after a failed round over the URLs
	// (default 250ms).
	ReconnectWait time.Duration
	// PingInterval: a PING is sent when nothing was read for this long;
	// two unanswered close the connection (default 10s).
	PingInterval time.Duration
	// Timeout bounds a dial, the handshake and a flush (default 5s).
	Timeout time.Duration
	Logger  *slog.Logger
	// OnReconnect is called (on its own goroutine) after a reconnect,
	// once the subscriptions are made again.
	OnReconnect func()
}

type sub struct {
	subject, queue string
	h              Handler
}

// Conn is a forwarding connection.
type Conn struct {
	opts Options
	log  *slog.Logger

	smu     sync.Mutex
	subs    map[uint64]*sub // active
	retired map[uint64]retiredSub
	nextSid uint64

	wmu       sync.Mutex
	conn      net.Conn // nil while disconnected
	wbuf      []byte
	pingsSent uint64 // all PINGs sent on the current connection
	closed    bool

	pingsOut atomic.Int32 // liveness PINGs sent since the server was last heard

	pongs      atomic.Uint64 // PONGs received on the current connection
	info       atomic.Pointer[serverInfo]
	inMsgs     atomic.Uint64
	outMsgs    atomic.Uint64
	reconnects atomic.Uint64
	done       chan struct{}
	wg         sync.WaitGroup
}

// retiredSub is an unsubscribed subscription whose messages may still
// be in flight: they are handled until the server answers the PING sent
// after the UNSUB (everything it delivered before is read by then).
type retiredSub struct {
	h    Handler
	ping uint64
}

type serverInfo struct {
	ServerID    string `json:"server_id"`
	ServerName  string `json:"server_name"`
	Nonce       string `json:"nonce"`
	MaxPayload  int64  `json:"max_payload"`
	Headers     bool   `json:"headers"`
	TLSRequired bool   `json:"tls_required"`
	LameDuck    bool   `json:"ldm"`
}

const readBufSize = 64 << 10

// flushAt is the buffered size at which a publish flushes at once.
const flushAt = 32 << 10

// Dial connects (to the first URL that answers) and starts the read loop.
func Dial(o Options) (*Conn, error) {
	if len(o.URLs) == 0 {
		return nil, errors.New("wire: no URL")
	}
	if o.ReconnectWait <= 0 {
		o.ReconnectWait = 250 * time.Millisecond
	}
	if o.PingInterval <= 0 {
		o.PingInterval = 10 * time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.JWT != "" { // the same as the callbacks, from the JWT and seed
		token, seed := o.JWT, o.Seed
		o.UserJWT = func() (string, error) { return token, nil }
		o.Sign = func(nonce []byte) ([]byte, error) {
			kp, err := nkeys.FromSeed(seed)
			if err != nil {
				return nil, fmt.Errorf("seed: %w", err)
			}
			defer kp.Wipe()
			return kp.Sign(nonce)
		}
	}
	c := &Conn{opts: o, log: o.Logger, subs: map[uint64]*sub{}, retired: map[uint64]retiredSub{}, done: make(chan struct{})}
	conn, br, err := c.connectAny()
	if err != nil {
		return nil, err
	}
	c.conn = conn
	c.wg.Add(1)
	go c.loop(conn, br)
	return c, nil
}

// SplitURLs splits a comma-separated URL list.
func SplitURLs(s string) []string {
	var out []string
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

func (c *Conn) connectAny() (net.Conn, *bufio.Reader, error) {
	var errs []error
	for _, u := range c.opts.URLs {
		conn, br, err := c.connect(u)
		if err == nil {
			return conn, br, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", u, err))
	}
	return nil, nil, errors.Join(errs...)
}

func hostPort(raw string) (string, error) {
	if !strings.Contains(raw, "://") {
		raw = "nats://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", err
	}
	if u.Scheme != "nats" && u.Scheme != "tls" && u.Scheme != "" {
		return "", fmt.Errorf("scheme %q: only nats:// or tls://", u.Scheme)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "4222")
	}
	return host, nil
}

// connect dials one URL and completes the handshake: INFO, CONNECT,
// PING, and the PONG (or -ERR) that answers it.
func (c *Conn) connect(raw string) (net.Conn, *bufio.Reader, error) {
	addr, err := hostPort(raw)
	if err != nil {
		return nil, nil, err
	}
	if c.opts.TLS == nil && strings.HasPrefix(raw, "tls://") {
		return nil, nil, errors.New("a tls:// URL needs Options.TLS")
	}
	conn, err := net.DialTimeout("tcp", addr, c.opts.Timeout)
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (net.Conn, *bufio.Reader, error) {
		conn.Close() // the TLS connection once upgraded
		return nil, nil, err
	}
	_ = conn.SetDeadline(time.Now().Add(c.opts.Timeout))
	br := bufio.NewReaderSize(conn, readBufSize)
	line, err := br.ReadSlice('\n')
	if err != nil {
		return fail(fmt.Errorf("reading INFO: %w", err))
	}
	js, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("INFO "))
	if !ok {
		return fail(fmt.Errorf("expected INFO, got %q", trim(line)))
	}
	var info serverInfo
	if err := json.Unmarshal(js, &info); err != nil {
		return fail(fmt.Errorf("INFO: %w", err))
	}
	switch {
	case info.TLSRequired && c.opts.TLS == nil:
		return fail(errors.New("server requires TLS: set Options.TLS"))
	case !info.TLSRequired && c.opts.TLS != nil:
		return fail(errors.New("TLS is configured but the server does not require it (a plaintext port)"))
	case c.opts.TLS != nil:
		// The server sent INFO in plaintext and now waits for the
		// ClientHello: nothing else is buffered.
		if br.Buffered() != 0 {
			return fail(errors.New("unexpected data after INFO before the TLS handshake"))
		}
		tc := c.opts.TLS.Clone()
		if tc.ServerName == "" {
			tc.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tconn := tls.Client(conn, tc)
		if err := tconn.Handshake(); err != nil {
			return fail(fmt.Errorf("TLS handshake: %w", err))
		}
		conn = tconn
		br = bufio.NewReaderSize(conn, readBufSize)
	}
	if !info.Headers {
		return fail(errors.New("server does not support headers"))
	}
	connect := map[string]any{"verbose": false, "pedantic": false, "lang": "go-wire", "version": "1",
		"protocol": 1, "headers": true, "no_responders": true, "name": c.opts.Name}
	if c.opts.UserJWT != nil {
		jwt, err := c.opts.UserJWT()
		if err != nil {
			return fail(fmt.Errorf("user JWT: %w", err))
		}
		if c.opts.Sign == nil {
			return fail(errors.New("user JWT without a signature callback"))
		}
		sig, err := c.opts.Sign([]byte(info.Nonce))
		if err != nil {
			return fail(fmt.Errorf("signing the nonce: %w", err))
		}
		connect["jwt"], connect["sig"] = jwt, base64.RawURLEncoding.EncodeToString(sig)
	}
	cj, _ := json.Marshal(connect)
	if _, err := conn.Write(append(append([]byte("CONNECT "), cj...), "\r\nPING\r\n"...)); err != nil {
		return fail(err)
	}
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return fail(fmt.Errorf("handshake: %w", err))
		}
		switch l := bytes.TrimSpace(line); {
		case bytes.Equal(l, []byte("PONG")):
			_ = conn.SetDeadline(time.Time{})
			c.info.Store(&info)
			return conn, br, nil
		case bytes.HasPrefix(l, []byte("-ERR")):
			return fail(fmt.Errorf("server: %s", trim(l)))
		case bytes.HasPrefix(l, []byte("INFO ")), bytes.Equal(l, []byte("+OK")):
		case bytes.Equal(l, []byte("PING")):
			_, _ = conn.Write([]byte("PONG\r\n"))
		default:
			return fail(fmt.Errorf("handshake: unexpected %q", trim(l)))
		}
	}
}

func trim(b []byte) string {
	s := string(bytes.TrimSpace(b))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// ServerName is the name of the server the connection is on ("" while
// disconnected).
func (c *Conn) ServerName() string {
	c.wmu.Lock()
	up := c.conn != nil
	c.wmu.Unlock()
	if i := c.info.Load(); i != nil && up {
		return i.ServerName
	}
	return ""
}

// Connected reports whether the connection is up.
func (c *Conn) Connected() bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.conn != nil
}

// Stats: messages received and published, reconnects.
func (c *Conn) Stats() (in, out, reconnects uint64) {
	return c.inMsgs.Load(), c.outMsgs.Load(), c.reconnects.Load()
}

// Subscribe subscribes to subject (in queue group queue, if not empty).
func (c *Conn) Subscribe(subject, queue string, h Handler) (uint64, error) {
	if subject == "" || strings.ContainsAny(subject, " \t\r\n") || strings.ContainsAny(queue, " \t\r\n") {
		return 0, fmt.Errorf("wire: invalid subject %q or queue %q", subject, queue)
	}
	// Lock order: wmu, then smu.
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closed {
		return 0, ErrClosed
	}
	c.smu.Lock()
	c.nextSid++
	sid := c.nextSid
	c.subs[sid] = &sub{subject: subject, queue: queue, h: h}
	c.smu.Unlock()
	if c.conn == nil {
		return sid, nil // subscribed on reconnect
	}
	c.wbuf = appendSub(c.wbuf, sid, subject, queue)
	return sid, c.flushLocked()
}

func appendSub(b []byte, sid uint64, subject, queue string) []byte {
	b = append(b, "SUB "...)
	b = append(b, subject...)
	if queue != "" {
		b = append(b, ' ')
		b = append(b, queue...)
	}
	b = append(b, ' ')
	b = strconv.AppendUint(b, sid, 10)
	return append(b, "\r\n"...)
}

// Unsubscribe removes a subscription. Messages the server sent before it
// processed the UNSUB still reach the handler.
func (c *Conn) Unsubscribe(sid uint64) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.smu.Lock()
	s, ok := c.subs[sid]
	delete(c.subs, sid)
	if ok && c.conn != nil {
		c.pingsSent++
		c.retired[sid] = retiredSub{h: s.h, ping: c.pingsSent}
	}
	c.smu.Unlock()
	if !ok || c.conn == nil {
		return nil // (not subscribed again on reconnect)
	}
	c.wbuf = append(c.wbuf, "UNSUB "...)
	c.wbuf = strconv.AppendUint(c.wbuf, sid, 10)
	c.wbuf = append(c.wbuf, "\r\nPING\r\n"...)
	return c.flushLocked()
}

// Publish writes a message to prefix+subject (prefix may be empty) with
// reply (may be empty), header block hdr (nil: none) and data. It is
// buffered: the read loop flushes once the messages it read are handled,
// a full buffer is flushed at once, and Flush flushes.
func (c *Conn) Publish(prefix string, subject, reply, hdr, data []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.conn == nil {
		if c.closed {
			return ErrClosed
		}
		return ErrDisconnected
	}
	if i := c.info.Load(); i != nil && i.MaxPayload > 0 && int64(len(hdr)+len(data)) > i.MaxPayload {
		return ErrMaxPayload
	}
	b := c.wbuf
	if hdr != nil {
		b = append(b, "HPUB "...)
	} else {
		b = append(b, "PUB "...)
	}
	b = append(b, prefix...)
	b = append(b, subject...)
	b = append(b, ' ')
	if len(reply) > 0 {
		b = append(b, reply...)
		b = append(b, ' ')
	}
	if hdr != nil {
		b = strconv.AppendInt(b, int64(len(hdr)), 10)
		b = append(b, ' ')
	}
	b = strconv.AppendInt(b, int64(len(hdr)+len(data)), 10)
	b = append(b, "\r\n"...)
	b = append(b, hdr...)
	b = append(b, data...)
	c.wbuf = append(b, "\r\n"...)
	c.outMsgs.Add(1)
	if len(c.wbuf) >= flushAt {
		return c.flushLocked()
	}
	return nil
}

// Flush writes what is buffered.
func (c *Conn) Flush() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.flushLocked()
}

func (c *Conn) flushLocked() error {
	if c.conn == nil {
		if c.closed {
			return ErrClosed
		}
		return nil
	}
	if len(c.wbuf) == 0 {
		return nil
	}
	_ = c.conn.SetWriteDeadline(time.Now().Add(c.opts.Timeout))
	_, err := c.conn.Write(c.wbuf)
	c.wbuf = c.wbuf[:0]
	if err != nil {
		c.conn.Close() // the read loop sees it and reconnects
	}
	return err
}

// Sync waits until the server has processed everything sent before it
// (a PING and its PONG), so a subscription made before it is in place.
// A reconnect meanwhile ends the wait (it subscribes everything again).
func (c *Conn) Sync(timeout time.Duration) error {
	c.wmu.Lock()
	if c.conn == nil {
		c.wmu.Unlock()
		if c.closed {
			return ErrClosed
		}
		return ErrDisconnected
	}
	c.pingsSent++
	target, conn := c.pingsSent, c.conn
	c.wbuf = append(c.wbuf, "PING\r\n"...)
	err := c.flushLocked()
	c.wmu.Unlock()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(timeout)
	for c.pongs.Load() < target {
		c.wmu.Lock()
		same := c.conn == conn
		c.wmu.Unlock()
		if !same {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("wire: no PONG in %s", timeout)
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// Close closes the connection; the read loop ends.
func (c *Conn) Close() {
	c.wmu.Lock()
	if !c.closed {
		c.closed = true
		close(c.done)
		if c.conn != nil {
			_ = c.flushLocked()
			c.conn.Close()
		}
	}
	c.wmu.Unlock()
	c.wg.Wait()
}

// loop reads and dispatches until Close, reconnecting on errors.
func (c *Conn) loop(conn net.Conn, br *bufio.Reader) {
	defer c.wg.Done()
	for {
		err := c.read(conn, br)
		c.wmu.Lock()
		conn.Close()
		c.conn = nil
		c.wbuf = c.wbuf[:0] // publishes of the lost connection are lost with it
		closed := c.closed
		c.wmu.Unlock()
		if closed {
			return
		}
		c.log.Warn("wire: connection lost, reconnecting", "name", c.opts.Name, "error", err)
		var logged time.Time
		for attempt := 1; ; attempt++ {
			select {
			case <-c.done:
				return
			default:
			}
			var cerr error
			if conn, br, cerr = c.connectAny(); cerr == nil {
				break
			}
			if time.Since(logged) > 30*time.Second { // not every ReconnectWait
				c.log.Warn("wire: reconnect failed", "name", c.opts.Name, "attempt", attempt, "error", cerr)
				logged = time.Now()
			}
			select {
			case <-c.done:
				return
			case <-time.After(c.opts.ReconnectWait):
			}
		}
		c.wmu.Lock()
		if c.closed {
			c.wmu.Unlock()
			conn.Close()
			return
		}
		c.smu.Lock()
		c.wbuf = c.wbuf[:0]
		// In the order they were made (sids grow), so a subscription made
		// last to show the others are in place (the ingest's probe)
		// still comes last: the server, and its routes, take them in
		// this order.
		for _, sid := range slices.Sorted(maps.Keys(c.subs)) {
			s := c.subs[sid]
			c.wbuf = appendSub(c.wbuf, sid, s.subject, s.queue)
		}
		c.retired = map[uint64]retiredSub{}
		c.smu.Unlock()
		c.conn, c.pingsSent = conn, 0
		c.pingsOut.Store(0)
		c.pongs.Store(0)
		err = c.flushLocked()
		c.wmu.Unlock()
		c.reconnects.Add(1)
		if err == nil && c.opts.OnReconnect != nil {
			go c.opts.OnReconnect()
		}
	}
}

var (
	opMsg  = []byte("MSG ")
	opHMsg = []byte("HMSG ")
)

// read handles the connection's messages until it fails.
func (c *Conn) read(conn net.Conn, br *bufio.Reader) error {
	var scratch []byte // subject and reply of the current message
	var args [6][]byte
	var m Msg
	for n := 0; ; n++ {
		if br.Buffered() == 0 || n%1024 == 0 {
			if br.Buffered() == 0 {
				// Everything read is handled: send what it produced
				// before blocking on the next read.
				if err := c.Flush(); err != nil {
					return err
				}
			}
			_ = conn.SetReadDeadline(time.Now().Add(c.opts.PingInterval))
		}
		line, err := br.ReadSlice('\n')
		if err != nil {
			var ne net.Error
			if len(line) == 0 && errors.As(err, &ne) && ne.Timeout() {
				if err := c.ping(); err != nil {
					return err
				}
				continue
			}
			return err
		}
		if c.pingsOut.Load() != 0 {
			c.pingsOut.Store(0) // the server is alive
		}
		hdr := bytes.HasPrefix(line, opHMsg)
		if !hdr && !bytes.HasPrefix(line, opMsg) {
			if err := c.control(line); err != nil {
				return err
			}
			continue
		}
		if hdr {
			line = line[len(opHMsg):]
		} else {
			line = line[len(opMsg):]
		}
		a := split(bytes.TrimRight(line, "\r\n"), args[:0])
		// MSG subject sid [reply] size; HMSG subject sid [reply] hsize size
		want := 3
		if hdr {
			want = 4
		}
		if len(a) != want && len(a) != want+1 {
			return fmt.Errorf("wire: malformed %q", trim(line))
		}
		sid, err1 := strconv.ParseUint(string(a[1]), 10, 64)
		size, err2 := strconv.Atoi(string(a[len(a)-1]))
		hsize := 0
		var err3 error
		if hdr {
			hsize, err3 = strconv.Atoi(string(a[len(a)-2]))
		}
		if err1 != nil || err2 != nil || err3 != nil || size < 0 || hsize < 0 || hsize > size {
			return fmt.Errorf("wire: malformed %q", trim(line))
		}
		scratch = append(scratch[:0], a[0]...)
		ns := len(scratch)
		if len(a) == want+1 {
			scratch = append(scratch, a[2]...)
		}
		m.Subject, m.Reply = scratch[:ns], scratch[ns:]
		var body []byte
		if size+2 <= readBufSize {
			if body, err = br.Peek(size + 2); err != nil {
				return err
			}
		} else {
			body = make([]byte, size+2)
			if _, err = io.ReadFull(br, body); err != nil {
				return err
			}
		}
		if m.Header = nil; hdr {
			m.Header = body[:hsize]
		}
		m.Data = body[hsize:size]
		c.inMsgs.Add(1)
		if h := c.handler(sid); h != nil {
			h(&m)
		}
		if size+2 <= readBufSize {
			_, _ = br.Discard(size + 2)
		}
	}
}

func (c *Conn) handler(sid uint64) Handler {
	c.smu.Lock()
	defer c.smu.Unlock()
	if s := c.subs[sid]; s != nil {
		return s.h
	}
	if r, ok := c.retired[sid]; ok {
		return r.h
	}
	return nil
}

// control handles a line that is not a message.
func (c *Conn) control(line []byte) error {
	l := bytes.TrimSpace(line)
	switch {
	case bytes.Equal(l, []byte("PING")):
		c.wmu.Lock()
		c.wbuf = append(c.wbuf, "PONG\r\n"...)
		err := c.flushLocked()
		c.wmu.Unlock()
		return err
	case bytes.Equal(l, []byte("PONG")):
		n := c.pongs.Add(1)
		c.smu.Lock()
		for sid, r := range c.retired {
			if r.ping <= n {
				delete(c.retired, sid)
			}
		}
		c.smu.Unlock()
	case bytes.Equal(l, []byte("+OK")):
	case bytes.HasPrefix(l, []byte("INFO ")):
		var info serverInfo
		if err := json.Unmarshal(l[5:], &info); err == nil {
			if old := c.info.Load(); old != nil {
				// Async INFO may omit fields; keep what the handshake learned.
				info.ServerName, info.ServerID, info.Nonce = old.ServerName, old.ServerID, old.Nonce
				if info.MaxPayload == 0 {
					info.MaxPayload = old.MaxPayload
				}
				info.Headers = old.Headers
			}
			c.info.Store(&info)
		}
	case bytes.HasPrefix(l, []byte("-ERR")):
		msg := trim(l)
		// Permission and subscription errors leave the connection open;
		// the server closes it after any other.
		lower := strings.ToLower(msg)
		if strings.Contains(lower, "permissions violation") || strings.Contains(lower, "invalid subject") ||
			strings.Contains(lower, "maximum subscriptions") {
			c.log.Warn("wire: server error", "name", c.opts.Name, "error", msg)
			return nil
		}
		return fmt.Errorf("wire: server: %s", msg)
	default:
		return fmt.Errorf("wire: unexpected %q", trim(l))
	}
	return nil
}

// ping is sent when nothing was read for PingInterval; the second one
// unanswered ends the connection.
func (c *Conn) ping() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.pingsOut.Add(1) > 2 {
		return errors.New("wire: server did not answer two PINGs")
	}
	c.pingsSent++
	c.wbuf = append(c.wbuf, "PING\r\n"...)
	return c.flushLocked()
}

// split splits on spaces and tabs into out (no allocation for up to
// cap(out) fields).
func split(b []byte, out [][]byte) [][]byte {
	start := -1
	for i, ch := range b {
		if ch == ' ' || ch == '\t' {
			if start >= 0 {
				out = append(out, b[start:i])
				start = -1
			}
		} else if start < 0 {
			start = i
		}
	}
	if start >= 0 {
		out = append(out, b[start:])
	}
	return out
}
