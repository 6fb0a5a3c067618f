package jsscan

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/jserr"
	"github.com/msgplatform/platform/internal/retry"
)

// Options narrow a Range.
type Options struct {
	// To is the last sequence read (0: the stream's last when Range
	// starts).
	To uint64
	// HeadersOnly reads headers without payloads (jetstream's
	// Nats-Msg-Size header gives each payload's size).
	HeadersOnly bool
}

// Range calls fn for every message of stream from sequence from to o.To
// (0: the last message present when it starts), in order, until fn
// returns false.
func Range(ctx context.Context, js jetstream.JetStream, stream string, from uint64, o Options, fn func(*jetstream.RawStreamMsg) bool) error {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return fmt.Errorf("jsscan: %s: %w", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return fmt.Errorf("jsscan: %s: %w", stream, err)
	}
	last := info.State.LastSeq
	if o.To > 0 {
		last = min(last, o.To)
	}
	if info.State.Msgs == 0 || from > last {
		return nil
	}
	from = max(from, info.State.FirstSeq, 1)
	var c jetstream.Consumer
	failures := 0
	var lagSince time.Time
	caughtUp := false // the replica read said nothing is pending
	for {
		if c == nil {
			if c, err = js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
				DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: from, HeadersOnly: o.HeadersOnly,
			}); err != nil {
				if jserr.Transient(err) && failures < 5 {
					failures++
					retry.Sleep(ctx, time.Duration(100<<failures)*time.Millisecond)
					c = nil
					continue
				}
				return fmt.Errorf("jsscan: read %s: %w", stream, err)
			}
		}
		// Ask for no more than the scan still needs: a pull request for
		// more than the stream holds is answered only when it expires.
		batch, err := c.Fetch(int(min(500, last-from+1)), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			if jserr.Transient(err) && failures < 5 {
				failures++
				retry.Sleep(ctx, time.Duration(100<<failures)*time.Millisecond)
				c = nil // read again from the next sequence
				continue
			}
			return fmt.Errorf("jsscan: read %s: %w", stream, err)
		}
		n := 0
		done := false
		for msg := range batch.Messages() {
			n++
			md, err := msg.Metadata()
			if err != nil {
				continue
			}
			raw := &jetstream.RawStreamMsg{Subject: msg.Subject(), Sequence: md.Sequence.Stream, Header: msg.Headers(), Data: msg.Data(), Time: md.Timestamp}
			from = md.Sequence.Stream + 1
			if !fn(raw) || md.Sequence.Stream >= last {
				// Interior deletes leave fewer messages than the batch
				// asked for: do not wait for the request to expire.
				done = true
				break
			}
			if md.NumPending == 0 {
				// The replica has nothing more now. This fetch stays open
				// until it expires, and an ordered consumer takes one at a
				// time: read on with a new one, from the next sequence.
				caughtUp = true
				c = nil
				break
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
			if jserr.Transient(err) && failures < 5 && !done {
				failures++
				retry.Sleep(ctx, time.Duration(100<<failures)*time.Millisecond)
				c = nil
				continue
			}
			return fmt.Errorf("jsscan: read %s: %w", stream, err)
		}
		if n > 0 {
			failures = 0
		}
		if done || ctx.Err() != nil {
			return ctx.Err()
		}
		if n == 0 || caughtUp {
			// The ordered consumer reads one replica, which may not have
			// applied everything the leader had when the scan started
			// (entries written just before a request is frozen). Only the
			// leader can say the rest is gone.
			more, err := leaderHolds(ctx, s, from, last)
			if err != nil {
				return fmt.Errorf("jsscan: read %s: %w", stream, err)
			}
			if !more {
				return nil
			}
			if lagSince.IsZero() {
				lagSince = time.Now()
			} else if time.Since(lagSince) > maxReplicaLag {
				return fmt.Errorf("jsscan: read %s: the replica read lags the leader, which holds entries in %d..%d, for over %s", stream, from, last, maxReplicaLag)
			}
			caughtUp = false
			retry.Sleep(ctx, 100*time.Millisecond)
		}
	}
}

// maxReplicaLag bounds how long Range waits for the replica it reads to
// catch up with the leader.
const maxReplicaLag = 10 * time.Second

// leaderHolds reports whether the stream's leader holds any message with
// a sequence in from..to.
func leaderHolds(ctx context.Context, s jetstream.Stream, from, to uint64) (bool, error) {
	info, err := s.Info(ctx, jetstream.WithDeletedDetails(true))
	if err != nil {
		return false, err
	}
	st := info.State
	from, to = max(from, st.FirstSeq), min(to, st.LastSeq)
	if st.Msgs == 0 || from > to {
		return false, nil
	}
	deleted := 0
	for _, q := range st.Deleted {
		if q >= from && q <= to {
			deleted++
		}
	}
	return uint64(deleted) < to-from+1, nil
}
