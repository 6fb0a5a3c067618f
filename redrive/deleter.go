package redrive

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/parallel"
	"github.com/msgplatform/platform/internal/retry"
)

// Deletion of redriven entries. The deleter takes the acker's items in
// order, removes the sent ones from the DLQ in batches, and only then
// settles them (advances Progress.Next and counts them sent): the run's
// position, its checkpoints and its completion never run ahead of the
// DLQ. An entry acknowledged but not deleted when a run crashes lies
// beyond the checkpointed position: the next runner sends it again with
// the same message id (dropped by the destination's duplicate window) and
// deletes it then.
//
// A batch is removed with one purge below s+1 only when every entry still
// present at or below s is one this run acknowledged (a contiguous stretch
// lo..s of the frozen selection, nothing present below lo); sequences
// never come back, so the check stays true once made. Otherwise it falls
// back to deletes, deleteConcurrency at a time.
//
// Batches are gathered, since a purge costs the broker about the same
// whatever it removes: a small batch (under deleteMin) is removed once
// deleteDelay old, a larger one at deleteBatch entries or deleteMaxDelay
// old; flushNow removes at once (a drain, a pause). The delay also bounds
// the repeats after a crash. Design: docs/design/redrive-deletion.md.
const (
	deleteBatch       = 32768
	deleteMin         = 1024
	deleteDelay       = 100 * time.Millisecond
	deleteMaxDelay    = time.Second
	deleteConcurrency = 32
	deleteAttempts    = 5
	// deleteQueue is the deleter's input buffer: the acker goes on while
	// a purge is in flight.
	deleteQueue = 8192
)

type deleter struct {
	rn    *runner
	st    jetstream.Stream
	name  string // the DLQ stream
	ch    chan item
	flush chan struct{}
	done  chan struct{}
	// clear: no entry below this sequence is present in the DLQ.
	clear uint64
}

func newDeleter(rn *runner, st jetstream.Stream, name string) *deleter {
	return &deleter{rn: rn, st: st, name: name, ch: make(chan item, deleteQueue), flush: make(chan struct{}, 1), done: make(chan struct{})}
}

func (d *deleter) add(it item) { d.ch <- it }

// close ends the input; loop returns once it has settled what it got.
func (d *deleter) close() { close(d.ch) }

// flushNow asks for the gathered entries to be removed without waiting
// for deleteDelay.
func (d *deleter) flushNow() {
	select {
	case d.flush <- struct{}{}:
	default:
	}
}

// loop removes and settles batches until the input ends. After a failure
// (recorded as the pipeline's error) or once ctx ends (a crash or a
// shutdown) it settles nothing more: the position stays where the DLQ is.
func (d *deleter) loop(ctx context.Context) {
	defer close(d.done)
	defer func() {
		for range d.ch { // drain so the acker never blocks
		}
	}()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var batch []item
	extended := false // the batch is past deleteDelay, large, waiting for more
	for open := true; open; {
		due := false
		select {
		case it, ok := <-d.ch:
			if !ok {
				open, due = false, true
				break
			}
			if len(batch) == 0 {
				timer.Reset(deleteDelay)
				extended = false
			}
			batch = append(batch, it)
			due = len(batch) >= deleteBatch
		case <-d.flush:
			due = true
		case <-timer.C:
			due = extended || len(batch) < deleteMin
			if !due {
				timer.Reset(deleteMaxDelay - deleteDelay)
				extended = true
			}
		}
		if !due || len(batch) == 0 {
			continue
		}
		timer.Stop()
	more: // whatever is ready too
		for open && len(batch) < deleteBatch {
			select {
			case it, ok := <-d.ch:
				if !ok {
					open = false
					break more
				}
				batch = append(batch, it)
			default:
				break more
			}
		}
		if ctx.Err() != nil {
			return
		}
		if err := d.remove(ctx, batch); err != nil {
			d.rn.fail(err)
			return
		}
		d.rn.settle(batch)
		d.rn.kickAudit()
		batch = make([]item, 0, len(batch))
	}
}

// stretch is a contiguous run lo..hi of DLQ sequences that are all gone
// or acknowledged; sent are the acknowledged ones.
type stretch struct {
	lo, hi uint64
	sent   []uint64
}

func stretches(batch []item) []stretch {
	var out []stretch
	open := false
	for _, it := range batch {
		if it.skip && !it.gone {
			open = false // still present and not sent: never purged
			continue
		}
		if n := len(out); open && it.seq == out[n-1].hi+1 {
			out[n-1].hi = it.seq
		} else {
			out = append(out, stretch{lo: it.seq, hi: it.seq})
			open = true
		}
		if !it.skip {
			out[len(out)-1].sent = append(out[len(out)-1].sent, it.seq)
		}
	}
	return out
}

// remove deletes the batch's sent entries from the DLQ.
func (d *deleter) remove(ctx context.Context, batch []item) error {
	refreshed := false
	for _, s := range stretches(batch) {
		if len(s.sent) == 0 {
			continue
		}
		if s.lo > d.clear && !refreshed {
			if err := d.refresh(ctx); err != nil {
				return err
			}
			refreshed = true
		}
		if s.lo <= d.clear {
			if err := d.purge(ctx, s.hi+1); err != nil {
				return err
			}
			d.clear = max(d.clear, s.hi+1)
			continue
		}
		if err := d.deleteEach(ctx, s.sent); err != nil {
			return err
		}
	}
	return nil
}

// refresh learns the DLQ's first sequence.
func (d *deleter) refresh(ctx context.Context) error {
	return persist(ctx, func(ctx context.Context) error {
		info, err := d.st.Info(ctx)
		if err != nil {
			return fmt.Errorf("redrive: read DLQ %s: %w", d.name, err)
		}
		d.clear = max(d.clear, info.State.FirstSeq)
		return nil
	})
}

// purge removes every entry below seq.
func (d *deleter) purge(ctx context.Context, seq uint64) error {
	return persist(ctx, func(ctx context.Context) error {
		if err := d.st.Purge(ctx, jetstream.WithPurgeSequence(seq)); err != nil {
			return fmt.Errorf("redrive: remove redriven entries below %d from DLQ %s: %w", seq, d.name, err)
		}
		return nil
	})
}

// deleteEach deletes seqs, deleteConcurrency at a time; it returns the
// first error once every deletion has returned.
func (d *deleter) deleteEach(ctx context.Context, seqs []uint64) error {
	ops := make([]func(context.Context) error, len(seqs))
	for i, seq := range seqs {
		ops[i] = func(ctx context.Context) error {
			return persist(ctx, func(ctx context.Context) error {
				err := d.st.DeleteMsg(ctx, seq)
				if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
					return fmt.Errorf("redrive: delete redriven entry %d from DLQ %s: %w", seq, d.name, err)
				}
				return nil
			})
		}
	}
	return parallel.Run(ctx, deleteConcurrency, ops)
}

// persist runs op with a 5s timeout per attempt, backing off between
// attempts (internal/retry, any error retried), until it succeeds,
// deleteAttempts fail, or ctx ends; an op that succeeded after ctx ended
// still reports ctx's error.
func persist(ctx context.Context, op func(context.Context) error) error {
	err := retry.Do(ctx, retry.Policy{Initial: 100 * time.Millisecond, Max: time.Duration(100<<deleteAttempts) * time.Millisecond,
		MaxTries: deleteAttempts, Retryable: func(error) bool { return true }}, func(ctx context.Context) error {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return op(actx)
	})
	if err == nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}
