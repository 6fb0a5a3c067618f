package tenancy

import (
	"context"
	"sort"
	"time"

	"github.com/nats-io/nats.go"
)

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// gather publishes body on subject with a reply inbox of nc, for a
// request every server answers ($SYS), and hands each reply to fn, which
// says whether it counts (or an error that ends the gathering), until
// want replies counted, wait passed or ctx ended. It returns how many
// counted.
func gather(ctx context.Context, nc *nats.Conn, subject string, body []byte, want int, wait time.Duration,
	fn func(*nats.Msg) (counts bool, err error)) (int, error) {
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return 0, err
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(subject, inbox, body); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	n := 0
	for n < want {
		msg, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			break
		}
		counts, err := fn(msg)
		if err != nil {
			return n, err
		}
		if counts {
			n++
		}
	}
	return n, nil
}
