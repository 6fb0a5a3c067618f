package wire

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// runServer starts a nats-server with opts and waits until it accepts
// clients.
func runServer(t *testing.T, opts *server.Options) *server.Server {
	t.Helper()
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(5 * time.Second) {
		t.Fatal("server not ready")
	}
	return s
}

func startServer(t *testing.T, port int) *server.Server {
	t.Helper()
	return runServer(t, &server.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true, MaxPayload: 256 << 10})
}

// dial connects to s; the connection is closed when the test ends.
func dial(t *testing.T, s *server.Server) *Conn {
	t.Helper()
	c, err := Dial(Options{URLs: []string{s.ClientURL()}, Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// reconnectingForwarder dials url (over tc when set) reconnecting every
// 50ms, runs forwarder on the connection and returns it with its count of
// reconnects; it is closed when the test ends.
func reconnectingForwarder(t *testing.T, url string, tc *tls.Config) (*Conn, *atomic.Int32) {
	t.Helper()
	var reconnected atomic.Int32
	c, err := Dial(Options{URLs: []string{url}, TLS: tc, ReconnectWait: 50 * time.Millisecond, OnReconnect: func() { reconnected.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	forwarder(t, c)
	return c, &reconnected
}

// forwarder subscribes to in.> and republishes each message to
// out.<subject> with an extra header line, as the tenancy ingest does; the
// subscription is in place on the server when it returns.
func forwarder(t *testing.T, c *Conn) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	_, err := c.Subscribe("in.>", "q", func(m *Msg) {
		n.Add(1)
		hdr := m.Header
		if hdr == nil {
			hdr = []byte("NATS/1.0\r\n\r\n")
		}
		hdr = append(bytes.TrimSuffix(append([]byte(nil), hdr...), []byte("\r\n")), "X-Fwd: yes\r\n\r\n"...)
		if err := c.Publish("out.", m.Subject, m.Reply, hdr, m.Data); err != nil {
			t.Errorf("publish: %v", err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Sync(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	return &n
}

func TestForwardKeepsHeadersPayloadAndReply(t *testing.T) {
	s := startServer(t, -1)
	defer s.Shutdown()
	c := dial(t, s)
	if c.ServerName() == "" {
		t.Fatal("no server name")
	}
	forwarder(t, c)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// A responder on the forwarded subject answers the original reply.
	_, err = nc.Subscribe("out.in.req", func(m *nats.Msg) { _ = m.Respond(append([]byte("re:"), m.Data...)) })
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *nats.Msg, 100)
	if _, err := nc.ChanSubscribe("out.in.plain.>", got); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	big := bytes.Repeat([]byte("x"), 100<<10) // larger than the read buffer
	msgs := []*nats.Msg{
		{Subject: "in.plain.a", Data: []byte("no headers")},
		{Subject: "in.plain.b", Data: []byte("with headers"), Header: nats.Header{"K": {"v1", "v2"}}},
		{Subject: "in.plain.c", Data: nil},
		{Subject: "in.plain.d", Data: big, Header: nats.Header{"Big": {"1"}}},
	}
	for _, m := range msgs {
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range msgs {
		select {
		case m := <-got:
			if m.Subject != "out."+want.Subject || !bytes.Equal(m.Data, want.Data) {
				t.Fatalf("message %d: got %s %d bytes, want out.%s %d bytes", i, m.Subject, len(m.Data), want.Subject, len(want.Data))
			}
			if m.Header.Get("X-Fwd") != "yes" {
				t.Fatalf("message %d: header %v", i, m.Header)
			}
			for k, v := range want.Header {
				if fmt.Sprint(m.Header.Values(k)) != fmt.Sprint(v) {
					t.Fatalf("message %d: header %s = %v, want %v", i, k, m.Header.Values(k), v)
				}
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("message %d not forwarded", i)
		}
	}
	resp, err := nc.Request("in.req", []byte("ping"), 5*time.Second)
	if err != nil || string(resp.Data) != "re:ping" {
		t.Fatalf("request through the forwarder: %v %v", err, resp)
	}
	in, out, _ := c.Stats()
	if in != 5 || out != 5 {
		t.Fatalf("stats: in %d out %d, want 5 and 5", in, out)
	}
}

func TestMaxPayloadIsRefusedNotSent(t *testing.T) {
	s := startServer(t, -1)
	defer s.Shutdown()
	c := dial(t, s)
	if err := c.Publish("", []byte("a"), nil, []byte("NATS/1.0\r\n\r\n"), make([]byte, 256<<10)); err != ErrMaxPayload {
		t.Fatalf("got %v, want ErrMaxPayload", err)
	}
	if err := c.Publish("", []byte("a"), nil, nil, make([]byte, 256<<10)); err != nil {
		t.Fatalf("exactly max_payload: %v", err)
	}
	if err := c.Flush(); err != nil || !c.Connected() {
		t.Fatalf("connection after the refusal: %v, connected %v", err, c.Connected())
	}
}

func TestReconnectSubscribesAgain(t *testing.T) {
	s := startServer(t, -1)
	c, reconnected := reconnectingForwarder(t, s.ClientURL(), nil)
	check := func(s *server.Server, tag string) {
		t.Helper()
		nc, err := nats.Connect(s.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		got, _ := nc.SubscribeSync("out.in.x")
		_ = nc.Flush()
		waitFor(t, func() bool { return s.NumSubscriptions() >= 2 })
		_ = nc.Publish("in.x", []byte(tag))
		m, err := got.NextMsg(5 * time.Second)
		if err != nil || string(m.Data) != tag {
			t.Fatalf("%s: %v %v", tag, err, m)
		}
	}
	check(s, "before")
	portN := s.Addr().(*net.TCPAddr).Port
	s.Shutdown()
	s.WaitForShutdown()
	waitFor(t, func() bool { return !c.Connected() })
	if err := c.Publish("", []byte("x"), nil, nil, nil); err != ErrDisconnected {
		t.Fatalf("publish while down: %v, want ErrDisconnected", err)
	}
	s2 := startServer(t, portN)
	defer s2.Shutdown()
	waitFor(t, func() bool { return c.Connected() && reconnected.Load() == 1 })
	check(s2, "after")
}

func TestUnsubscribeDeliversWhatWasInFlight(t *testing.T) {
	s := startServer(t, -1)
	defer s.Shutdown()
	c := dial(t, s)
	var mu sync.Mutex
	seen := 0
	block := make(chan struct{})
	first := true
	sid, err := c.Subscribe("u", "", func(m *Msg) {
		if first {
			first = false
			<-block // hold the read loop while the rest queue up
		}
		mu.Lock()
		seen++
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	waitFor(t, func() bool { return s.NumSubscriptions() >= 1 })
	for range 1000 {
		_ = nc.Publish("u", []byte("m"))
	}
	_ = nc.Flush()
	time.Sleep(100 * time.Millisecond) // all sent to the forwarder's socket
	done := make(chan error)
	go func() { done <- c.Unsubscribe(sid) }()
	time.Sleep(50 * time.Millisecond)
	close(block)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return seen == 1000 })
	_ = nc.Publish("u", []byte("late"))
	_ = nc.Flush()
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if seen != 1000 {
		t.Fatalf("handled %d, want 1000 (none after the unsubscribe)", seen)
	}
}

func TestDialErrors(t *testing.T) {
	if _, err := Dial(Options{}); err == nil {
		t.Fatal("no URL: no error")
	}
	if _, err := Dial(Options{URLs: []string{"tls://127.0.0.1:1"}}); err == nil || !bytes.Contains([]byte(err.Error()), []byte("Options.TLS")) {
		t.Fatalf("tls URL: %v", err)
	}
	if _, err := Dial(Options{URLs: []string{"nats://127.0.0.1:1"}, Timeout: time.Second}); err == nil {
		t.Fatal("nothing listening: no error")
	}
}

func TestSplit(t *testing.T) {
	got := split([]byte("a  b\tc "), nil)
	if len(got) != 3 || string(got[0]) != "a" || string(got[1]) != "b" || string(got[2]) != "c" {
		t.Fatalf("%q", got)
	}
	if u := SplitURLs(" nats://a:1, ,nats://b:2"); len(u) != 2 || u[1] != "nats://b:2" {
		t.Fatalf("%q", u)
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSyncWaitsForTheServer(t *testing.T) {
	s := startServer(t, -1)
	defer s.Shutdown()
	c := dial(t, s)
	for i := range 50 {
		if _, err := c.Subscribe(fmt.Sprintf("s.%d", i), "", func(*Msg) {}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Sync(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if n := s.NumSubscriptions(); n < 50 {
		t.Fatalf("after Sync the server has %d subscriptions, want 50", n)
	}
	c.Close()
	if err := c.Sync(time.Second); err != ErrClosed {
		t.Fatalf("Sync after Close: %v, want ErrClosed", err)
	}
}

// After a reconnect the subscriptions are made again in the order they
// were first made, so one made last (the ingest's probe) shows the others
// are in place. A minimal fake server records the SUB lines of each
// connection; the first connection is dropped once it has them.
func TestReconnectSubscribesInOrder(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	subsOf := make(chan []string, 2)
	const n = 40
	go func() {
		for range 2 {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func(conn net.Conn) {
				defer conn.Close()
				_, _ = conn.Write([]byte(`INFO {"server_name":"fake","headers":true,"max_payload":1048576}` + "\r\n"))
				br := bufio.NewReader(conn)
				var subs []string
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						return
					}
					switch f := strings.Fields(line); {
					case len(f) > 0 && f[0] == "PING":
						_, _ = conn.Write([]byte("PONG\r\n"))
					case len(f) > 1 && f[0] == "SUB":
						if subs = append(subs, f[1]); len(subs) == n {
							subsOf <- subs
							return // drop the connection: the client reconnects
						}
					}
				}
			}(conn)
		}
	}()
	c, err := Dial(Options{URLs: []string{"nats://" + ln.Addr().String()}, ReconnectWait: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var want []string
	for i := range n {
		subj := fmt.Sprintf("s%d", (i*7)%n) // not in any sorted order
		want = append(want, subj)
		if _, err := c.Subscribe(subj, "", func(*Msg) {}); err != nil {
			t.Fatal(err)
		}
	}
	_ = c.Flush()
	for round := range 2 {
		select {
		case got := <-subsOf:
			if !slices.Equal(got, want) {
				t.Fatalf("connection %d subscribed in the order %v, want %v", round+1, got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("connection %d: subscriptions not seen", round+1)
		}
	}
}
