package gather

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/synadia-io/orbit.go/natsext"
)

// ErrNoResponders: nobody is subscribed to the request's subject.
var ErrNoResponders = errors.New("gather: no responders")

// Options bound one gathering.
type Options struct {
	// Want ends it once fn has counted this many replies (0: no bound).
	Want int
	// Wait bounds the whole gathering from the request (required).
	Wait time.Duration
	// Stall ends it when no reply came for this long after the first
	// (0: no bound but Wait).
	Stall time.Duration
}

// Collect publishes body on subject through nc and hands each reply to
// fn, which says whether it counts or returns an error that ends the
// gathering (returned as is). It returns how many replies counted, and
// ErrNoResponders when the server said nobody listens.
func Collect(ctx context.Context, nc *nats.Conn, subject string, body []byte, o Options,
	fn func(*nats.Msg) (counts bool, err error)) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, o.Wait)
	defer cancel()
	var opts []natsext.RequestManyOpt
	if o.Stall > 0 {
		opts = append(opts, natsext.RequestManyStall(o.Stall))
	}
	replies, err := natsext.RequestMany(ctx, nc, subject, body, opts...)
	if err != nil {
		return 0, err
	}
	n := 0
	for msg, err := range replies {
		if errors.Is(err, nats.ErrNoResponders) {
			return n, ErrNoResponders
		}
		if err != nil {
			return n, nil // the subscription ended (ctx, a closed connection): what counted stands
		}
		if len(msg.Data) == 0 && msg.Header.Get("Status") == "503" {
			return n, ErrNoResponders
		}
		counts, err := fn(msg)
		if err != nil {
			return n, err
		}
		if counts {
			n++
		}
		if o.Want > 0 && n >= o.Want {
			return n, nil
		}
	}
	return n, nil
}
