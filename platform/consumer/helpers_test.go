package consumer

import (
	"context"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/platform"
)

// publishEvent publishes e on js with a default Publisher, failing the
// test unless the stream stored it.
func publishEvent(t testing.TB, ctx context.Context, js jetstream.JetStream, e platform.Event) {
	t.Helper()
	if _, err := platform.NewPublisher(js, platform.PublisherOptions{}).Publish(ctx, e); err != nil {
		t.Fatal(err)
	}
}

// publishJob publishes a job with data to subject on js, failing the test
// unless the queue's stream stored it.
func publishJob(t testing.TB, ctx context.Context, js jetstream.JetStream, subject string, data []byte) {
	t.Helper()
	if _, err := js.Publish(ctx, subject, data); err != nil {
		t.Fatal(err)
	}
}

// received returns the next value on ch, failing the test with msg if
// none comes within d.
func received[T any](t testing.TB, ch <-chan T, d time.Duration, msg string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
	}
	t.Fatal(msg)
	var zero T
	return zero
}

// slowLink is a TCP proxy in front of a NATS client port that holds what
// the client sends for delay (set at any time; zero passes it straight
// on) and passes what the server sends at once: a loaded machine or a
// slow link, where a pull request reaches the server late.
type slowLink struct {
	ln     net.Listener
	target string
	delay  atomic.Int64 // nanoseconds
}

func newSlowLink(t testing.TB, target string) *slowLink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &slowLink{ln: ln, target: strings.TrimPrefix(target, "nats://")}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go l.serve(t, c)
		}
	}()
	return l
}

func (l *slowLink) url() string { return "nats://" + l.ln.Addr().String() }

func (l *slowLink) serve(t testing.TB, client net.Conn) {
	server, err := net.Dial("tcp", l.target)
	if err != nil {
		_ = client.Close()
		return
	}
	t.Cleanup(func() { _ = client.Close(); _ = server.Close() })
	go func() { _, _ = io.Copy(client, server); _ = client.Close() }()
	type chunk struct {
		at time.Time
		b  []byte
	}
	q := make(chan chunk, 4096)
	go func() {
		defer server.Close()
		for c := range q {
			time.Sleep(time.Until(c.at))
			if _, err := server.Write(c.b); err != nil {
				return
			}
		}
	}()
	defer close(q)
	buf := make([]byte, 32<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			q <- chunk{at: time.Now().Add(time.Duration(l.delay.Load())), b: append([]byte(nil), buf[:n]...)}
		}
		if err != nil {
			return
		}
	}
}
