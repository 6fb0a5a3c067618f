package redrive

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The send path is a pipeline, so the rate does not depend on round
// trips: a prefetcher reads the frozen entries from the DLQ ahead of the
// sender; the sender takes one per token and publishes it asynchronously;
// the acker waits for the acks in order (retrying a failed publish with
// the same id); the deleter (deleter.go) removes the acknowledged entries
// from the DLQ in batches and advances Next, the prefix acknowledged and
// deleted, which is what checkpoints record.
type fetched struct {
	idx int
	seq uint64
	m   *jetstream.RawStreamMsg // nil: gone from the DLQ
	err error
}

type item struct {
	idx int
	seq uint64 // the DLQ entry's sequence
	// skip: nothing sent; gone: because the entry is no longer in the DLQ
	// (a skipped entry that is not gone stays where it is).
	skip, gone bool
	msg        *nats.Msg
	fut        jetstream.PubAckFuture
	link       Link
}

const (
	// prefetchAhead is how many DLQ entries the prefetcher pulls ahead of
	// the sender.
	prefetchAhead = 2048
)

func (rn *runner) prefetch(ctx context.Context, from int) <-chan fetched {
	ch := make(chan fetched, prefetchAhead)
	emit := func(f fetched) bool {
		select {
		case ch <- f:
			return f.err == nil
		case <-ctx.Done():
			return false
		}
	}
	stream := rn.dlqName
	go func() {
		defer close(ch)
		idx := from
		if idx >= len(rn.seqs) {
			return
		}
		// Fast path: stream the range with an ordered consumer that pulls
		// ahead (no round trip per batch); a frozen seq the stream skips
		// over is gone from the DLQ, and so is every frozen seq after the
		// stream's last message (sequences never come back). It reads
		// from the stream leader, so an entry deleted before the run
		// started is never seen again (a replica's direct get could lag).
		idx = rn.stream(ctx, stream, idx, emit)
		// Exact path for whatever is left.
		for ; idx < len(rn.seqs); idx++ {
			seq := rn.seqs[idx]
			var m *jetstream.RawStreamMsg
			var err error
			for attempt := 0; ; attempt++ {
				gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				m, err = rn.dlq.GetMsg(gctx, seq)
				cancel()
				if err == nil || errors.Is(err, jetstream.ErrMsgNotFound) || ctx.Err() != nil || attempt >= 4 {
					break
				}
				sleepCtx(ctx, time.Duration(100<<attempt)*time.Millisecond)
			}
			f := fetched{idx: idx, seq: seq, m: m}
			switch {
			case errors.Is(err, jetstream.ErrMsgNotFound):
				f.m = nil
			case err != nil:
				f.err = fmt.Errorf("redrive: read DLQ %s entry %d: %w", stream, seq, err)
			}
			if !emit(f) {
				return
			}
		}
	}()
	return ch
}

// stream emits the frozen entries from index idx on as an ordered
// consumer delivers them, and returns the index it got to: the caller
// reads whatever is left one by one (the stream stalled or failed).
func (rn *runner) stream(ctx context.Context, stream string, idx int, emit func(fetched) bool) int {
	c, err := rn.s.js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: rn.seqs[idx],
	})
	if err != nil {
		return idx
	}
	it, err := c.Messages(jetstream.PullMaxMessages(prefetchAhead))
	if err != nil {
		return idx
	}
	defer it.Stop()
	for idx < len(rn.seqs) && ctx.Err() == nil {
		msg, err := it.Next(jetstream.NextMaxWait(time.Second))
		if err != nil {
			return idx
		}
		md, err := msg.Metadata()
		if err != nil {
			return idx
		}
		sq := md.Sequence.Stream
		for idx < len(rn.seqs) && rn.seqs[idx] < sq {
			if !emit(fetched{idx: idx, seq: rn.seqs[idx]}) {
				return len(rn.seqs)
			}
			idx++
		}
		if idx < len(rn.seqs) && rn.seqs[idx] == sq {
			raw := &jetstream.RawStreamMsg{Subject: msg.Subject(), Sequence: sq, Header: msg.Headers(), Data: msg.Data(), Time: md.Timestamp}
			if !emit(fetched{idx: idx, seq: sq, m: raw}) {
				return len(rn.seqs)
			}
			idx++
		}
		if md.NumPending == 0 { // the last message: the rest is gone
			for ; idx < len(rn.seqs); idx++ {
				if !emit(fetched{idx: idx, seq: rn.seqs[idx]}) {
					return len(rn.seqs)
				}
			}
		}
	}
	return idx
}
