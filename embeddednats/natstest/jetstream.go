package natstest

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// StreamConfig is the configuration of stream name, read within 10 s.
func StreamConfig(t testing.TB, js jetstream.JetStream, name string) jetstream.StreamConfig {
	t.Helper()
	s, err := js.Stream(Context(t, 10*time.Second), name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	return s.CachedInfo().Config
}

// ConsumerConfig is the configuration of consumer name on stream, read
// within 10 s.
func ConsumerConfig(t testing.TB, js jetstream.JetStream, stream, name string) jetstream.ConsumerConfig {
	t.Helper()
	c, err := js.Consumer(Context(t, 10*time.Second), stream, name)
	if err != nil {
		t.Fatalf("consumer %s/%s: %v", stream, name, err)
	}
	return c.CachedInfo().Config
}

// FetchAll fetches n messages from c within 10 s, in batches waiting up
// to 5 s each. A consumer that was just created may not take pull
// requests yet (no responders): that is retried.
func FetchAll(t testing.TB, c jetstream.Consumer, n int, opts ...jetstream.FetchOpt) []jetstream.Msg {
	t.Helper()
	var out []jetstream.Msg
	WaitFor(t, 10*time.Second, func() error {
		batch, err := c.Fetch(n-len(out), append([]jetstream.FetchOpt{jetstream.FetchMaxWait(5 * time.Second)}, opts...)...)
		if err != nil {
			return err
		}
		for m := range batch.Messages() {
			out = append(out, m)
		}
		if err := batch.Error(); err != nil {
			return err
		}
		if len(out) < n {
			return fmt.Errorf("fetched %d of %d", len(out), n)
		}
		return nil
	})
	return out
}

// Connect connects to url with opts, fails the test when it cannot, and
// closes the connection when the test ends; it returns the connection
// and its JetStream.
func Connect(t testing.TB, url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc, JetStream(t, nc)
}

// JetStream is nc's JetStream made with opts; it fails the test when it
// cannot make one.
func JetStream(t testing.TB, nc *nats.Conn, opts ...jetstream.JetStreamOpt) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(nc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
