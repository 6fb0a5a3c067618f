package redrive

import (
	"context"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/platform/dlq"
)

// watcher counts the redriven events of one request that reach the
// watched DLQ again (distinct DLQ seqs of the original entries).
type watcher struct {
	mu    sync.Mutex
	seen  map[uint64]bool
	first string
	cc    jetstream.ConsumeContext
}

func startWatcher(ctx context.Context, js jetstream.JetStream, stream string, from uint64, id string) (*watcher, error) {
	w := &watcher{seen: map[uint64]bool{}}
	if stream == "" {
		return w, nil
	}
	c, err := js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: max(from, 1), HeadersOnly: true,
	})
	if err != nil {
		return nil, fmt.Errorf("redrive: watch %s: %w", stream, err)
	}
	cc, err := c.Consume(func(msg jetstream.Msg) {
		h := msg.Headers()
		req, seq, ok := RedriveOf(h)
		if !ok || req != id {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if !w.seen[seq] {
			w.seen[seq] = true
			if w.first == "" {
				w.first = h.Get(dlq.HeaderReason)
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("redrive: watch %s: %w", stream, err)
	}
	w.cc = cc
	return w, nil
}

func (w *watcher) counts(first string) (int, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if first == "" {
		first = w.first
	}
	return len(w.seen), first
}

func (w *watcher) stop() {
	if w.cc != nil {
		w.cc.Stop()
	}
}
