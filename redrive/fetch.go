package redrive

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/retry"
)

// The send path is a pipeline, so the rate does not depend on round
// trips: a prefetcher reads the frozen entries from the DLQ ahead of the
// sender; the sender takes one per token and publishes it asynchronously
// (publish.go); the acker waits for the acks in order (retrying a failed
// publish with the same id); the deleter (deleter.go) removes the acknowledged entries
// from the DLQ in batches and advances Next, the prefix acknowledged and
// deleted, which is what checkpoints record.
type fetched struct {
	idx int
	seq uint64
	e   *rawEntry // nil: gone from the DLQ
	err error
}

type item struct {
	idx int
	seq uint64 // the DLQ entry's sequence
	// skip: nothing sent; gone: because the entry is no longer in the DLQ
	// (a skipped entry that is not gone stays where it is).
	skip, gone bool
	// The redriven event (hdr and data nil once acknowledged); its
	// subject is link.Subject.
	hdr, data []byte
	tok       uint64    // the ack's token (publisher)
	at        time.Time // when it was published
	link      Link
}

// natsMsg is an event with header block hdr as nats.go publishes it.
func natsMsg(subject string, hdr, data []byte) (*nats.Msg, error) {
	m := &nats.Msg{Subject: subject, Data: data}
	if len(hdr) > 0 {
		h, err := nats.DecodeHeadersMsg(hdr)
		if err != nil {
			return nil, err
		}
		m.Header = h
	}
	return m, nil
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
		// Both paths below may read from any replica of the DLQ (the
		// broker places the ordered consumer, an R1 consumer, on a random
		// peer, and a direct get is answered by any), and a replica may
		// lag behind the leader in applying deletions, or even stores.
		// So whether an entry is gone is the leader's word, asked first
		// (its first sequence and its deleted entries): an entry the
		// leader had deleted when the run started is never sent, even if
		// a replica still delivers it, and an entry a replica lacks but
		// the leader holds is not taken for gone (it is read again).
		if h := rn.s.cfg.beforeRead; h != nil {
			h()
		}
		view, err := rn.leaderView(ctx)
		if err != nil {
			emit(fetched{idx: idx, seq: rn.seqs[idx], err: err})
			return
		}
		// Fast path: stream the range with an ordered consumer that pulls
		// ahead (no round trip per batch); a frozen seq the stream skips
		// over is gone from the DLQ, and so is every frozen seq after the
		// stream's last message (sequences never come back), if the
		// leader agrees.
		// Over the run's wire connection if it has one (wirepath.go). A
		// stream that ends early (a gap, a leader change) is opened again
		// from where it got to, as long as it gets somewhere.
		for stalls := 0; idx < len(rn.seqs) && stalls < 2 && ctx.Err() == nil; {
			var n int
			if rn.wc != nil {
				n = rn.streamWire(ctx, rn.wc, idx, view, emit)
			} else {
				n = rn.stream(ctx, stream, idx, view, emit)
			}
			if n == idx {
				stalls++
			}
			idx = n
		}
		// Exact path for whatever is left.
		for ; idx < len(rn.seqs); idx++ {
			seq := rn.seqs[idx]
			f := fetched{idx: idx, seq: seq}
			if !view.gone(seq) {
				var m *jetstream.RawStreamMsg
				if m, f.err = rn.readEntry(ctx, seq, &view); m != nil {
					f.e = rawOf(m)
				}
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
func (rn *runner) stream(ctx context.Context, stream string, idx int, view *leaderView, emit func(fetched) bool) int {
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
		var ok bool
		e := &rawEntry{hdr: encodeHeader(msg.Headers()), data: msg.Data()}
		if idx, ok = rn.delivered(idx, md.Sequence.Stream, md.NumPending, e, view, emit); !ok {
			return idx
		}
	}
	return idx
}

// delivered handles a message the DLQ delivered at stream sequence sq
// with pending messages after it, from frozen index idx on: the frozen
// entries before sq are gone (if the leader agrees), the one at sq is e
// (unless the leader had deleted it when the run started), and
// with nothing pending every frozen entry after it is gone (if the leader
// agrees). It returns the index it got to; ok false ends the stream
// there: a replica lacks an entry the leader holds, or the pipeline
// stopped (the index is then len(rn.seqs)).
func (rn *runner) delivered(idx int, sq, pending uint64, e *rawEntry, view *leaderView, emit func(fetched) bool) (int, bool) {
	for idx < len(rn.seqs) && rn.seqs[idx] < sq {
		if !view.gone(rn.seqs[idx]) {
			return idx, false // this replica lacks it, the leader has it
		}
		if !emit(fetched{idx: idx, seq: rn.seqs[idx]}) {
			return len(rn.seqs), false
		}
		idx++
	}
	if idx < len(rn.seqs) && rn.seqs[idx] == sq {
		f := fetched{idx: idx, seq: sq}
		if !view.gone(sq) { // else deleted on the leader before the run: gone
			f.e = e
		}
		if !emit(f) {
			return len(rn.seqs), false
		}
		idx++
	}
	if pending == 0 { // the last message: the rest is gone
		for ; idx < len(rn.seqs); idx++ {
			if !view.gone(rn.seqs[idx]) {
				return idx, false
			}
			if !emit(fetched{idx: idx, seq: rn.seqs[idx]}) {
				return len(rn.seqs), false
			}
		}
	}
	return idx, true
}

// leaderView is what the DLQ's leader held when asked: the entries below
// first and the deleted ones are gone.
type leaderView struct {
	first   uint64
	deleted []uint64 // sorted
}

func (v *leaderView) gone(seq uint64) bool {
	if seq < v.first {
		return true
	}
	_, found := slices.BinarySearch(v.deleted, seq)
	return found
}

// leaderView asks the DLQ's leader (stream info is the leader's answer)
// which entries are gone.
func (rn *runner) leaderView(ctx context.Context) (*leaderView, error) {
	var v *leaderView
	err := persist(ctx, func(ctx context.Context) error {
		info, err := rn.dlq.Info(ctx, jetstream.WithDeletedDetails(true))
		if err != nil {
			return fmt.Errorf("redrive: read DLQ %s: %w", rn.dlqName, err)
		}
		st := info.State
		v = &leaderView{first: st.FirstSeq, deleted: slices.Clone(st.Deleted)}
		if st.Msgs == 0 {
			v.first = max(v.first, st.LastSeq+1)
		}
		slices.Sort(v.deleted)
		return nil
	})
	return v, err
}

// readEntry reads one entry (the exact path): nil if it is gone. A
// replica that answers that it has no such entry may lag: the entry is
// gone only if the leader says so (view is refreshed then); otherwise it
// is read again, a few times, before the run gives up on it.
func (rn *runner) readEntry(ctx context.Context, seq uint64, view **leaderView) (*jetstream.RawStreamMsg, error) {
	var err error
	for attempt := 0; ; attempt++ {
		gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		m, gerr := rn.dlq.GetMsg(gctx, seq)
		cancel()
		switch {
		case gerr == nil:
			return m, nil
		case errors.Is(gerr, jetstream.ErrMsgNotFound):
			v, verr := rn.leaderView(ctx)
			if verr != nil {
				return nil, verr
			}
			if *view = v; v.gone(seq) {
				return nil, nil
			}
			err = fmt.Errorf("a replica lacks it while the leader holds it: %w", gerr)
		default:
			err = gerr
		}
		if ctx.Err() != nil || attempt >= 4 {
			return nil, fmt.Errorf("redrive: read DLQ %s entry %d: %w", rn.dlqName, seq, err)
		}
		retry.Sleep(ctx, time.Duration(100<<attempt)*time.Millisecond)
	}
}
