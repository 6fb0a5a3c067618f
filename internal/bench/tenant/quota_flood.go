package tenant

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// floodResult is one flood run: every offered event and its outcome.
type floodResult struct {
	offered int64
	// Every offered event ends in exactly one of these.
	early, acked, late int64            // acked before, within and after the measured window
	refused            int64            // the 429 of the quota
	stalled            int64            // held back: not sent, the in-flight window stayed full for a tick
	other              map[string]int64 // other errors, by kind
	unanswered         int64            // no ack nor error within floodAnswerWait after the flood
}

func (r floodResult) otherTotal() int64 {
	var n int64
	for _, v := range r.other {
		n += v
	}
	return n
}

// unaccounted is what no outcome counted: 0 unless the bench is wrong.
func (r floodResult) unaccounted() int64 {
	return r.offered - r.early - r.acked - r.late - r.refused - r.stalled - r.otherTotal() - r.unanswered
}

func (r floodResult) String() string {
	kinds := make([]string, 0, len(r.other))
	for k, v := range r.other {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, v))
	}
	slices.Sort(kinds)
	return fmt.Sprintf("offered %d: acked %d in the window, %d before, %d after; 429 %d; stalled %d; other errors %d [%s]; never answered %d; unaccounted %d",
		r.offered, r.acked, r.early, r.late, r.refused, r.stalled, r.otherTotal(), strings.Join(kinds, ", "), r.unanswered, r.unaccounted())
}

// medianLatencies takes each figure's median over the runs.
func medianLatencies(runs []latencies) latencies {
	pick := func(f func(l latencies) float64) float64 {
		v := make([]float64, len(runs))
		for i, l := range runs {
			v[i] = f(l)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return latencies{
		p50:    time.Duration(pick(func(l latencies) float64 { return float64(l.p50) })),
		p99:    time.Duration(pick(func(l latencies) float64 { return float64(l.p99) })),
		rate:   pick(func(l latencies) float64 { return l.rate }),
		errors: int(pick(func(l latencies) float64 { return float64(l.errors) })),
	}
}

// medianFlood is the run with the median acks in the measured window:
// a whole run, so its outcomes add up to what it offered.
func medianFlood(runs []floodResult) floodResult {
	sorted := slices.Clone(runs)
	slices.SortFunc(sorted, func(a, b floodResult) int { return cmp.Compare(a.acked, b.acked) })
	return sorted[len(sorted)/2]
}

// floodAnswerWait is how long after the flood its last publishes may
// still be answered; what is not answered then is counted unanswered.
const floodAnswerWait = 10 * time.Second

// errKind names an error of a flood publish for the outcome counts.
func errKind(err error) string {
	var apiErr *jetstream.APIError
	switch {
	case errors.As(err, &apiErr):
		return fmt.Sprintf("api_%d_%d", apiErr.Code, apiErr.ErrorCode)
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		return "no_responders"
	case errors.Is(err, jetstream.ErrAsyncPublishTimeout), errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrDisconnected):
		return "connection"
	case errors.Is(err, nats.ErrSlowConsumer):
		return "slow_consumer"
	}
	k := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, strings.ToLower(err.Error()))
	return k[:min(len(k), 40)]
}

// flood offers rate events/s spread over the connections for warmup+d
// (open loop: a 10 ms tick offers what fell due) and gives every offered
// event one outcome: acked before, within or after the measured d,
// refused with the 429, stalled (held back: its connection's in-flight
// window stayed full for a tick, so it was not sent), another error (by
// kind), or never answered (nothing within floodAnswerWait after the
// flood).
func flood(ctx context.Context, jss []jetstream.JetStream, rate float64, warmup, d time.Duration, payload []byte) floodResult {
	var offered, early, acked, late, refused, stalled, unanswered atomic.Int64
	var omu sync.Mutex
	other := map[string]int64{}
	otherErr := func(kind string) {
		omu.Lock()
		other[kind]++
		omu.Unlock()
	}
	start := time.Now()
	from, until := start.Add(warmup), start.Add(warmup+d)
	giveUp := until.Add(floodAnswerWait)
	perConn := rate / float64(len(jss))
	const tick = 10 * time.Millisecond
	var wg sync.WaitGroup
	for ci, js := range jss {
		futs := make(chan jetstream.PubAckFuture, 1<<16)
		wg.Add(2)
		go func() { // collects acks in order
			defer wg.Done()
			timeout := time.NewTimer(time.Until(giveUp))
			defer timeout.Stop()
			expired := false
			for f := range futs {
				var ok <-chan *jetstream.PubAck
				var errc <-chan error
				ok, errc = f.Ok(), f.Err()
				if expired {
					select {
					case <-ok:
						late.Add(1)
					case err := <-errc:
						countErr(err, &refused, otherErr)
					default:
						unanswered.Add(1)
					}
					continue
				}
				select {
				case <-ok:
					switch now := time.Now(); {
					case now.Before(from):
						early.Add(1)
					case now.Before(until):
						acked.Add(1)
					default:
						late.Add(1)
					}
				case err := <-errc:
					countErr(err, &refused, otherErr)
				case <-timeout.C:
					expired = true
					unanswered.Add(1)
				}
			}
		}()
		go func() {
			defer wg.Done()
			defer close(futs)
			var sent int64
			for n := 0; ; n++ {
				now := time.Now()
				if !now.Before(until) || ctx.Err() != nil {
					return
				}
				due := int64(perConn * now.Sub(start).Seconds())
				for sent < due {
					// A publisher whose window stays full for a tick is held
					// back: what falls due meanwhile is offered but not sent
					// (counted stalled), so the offer stays open loop and
					// nothing is published after the flood.
					f, err := js.PublishAsync(fmt.Sprintf("orders.a-%d-%d", ci, n%64), payload, jetstream.WithStallWait(tick))
					if errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
						offered.Add(due - sent)
						stalled.Add(due - sent)
						sent = due
						break
					}
					offered.Add(1)
					sent++
					if err != nil {
						otherErr("publish_" + errKind(err))
						continue
					}
					futs <- f
				}
				time.Sleep(tick)
			}
		}()
	}
	wg.Wait()
	omu.Lock()
	defer omu.Unlock()
	return floodResult{offered: offered.Load(), early: early.Load(), acked: acked.Load(), late: late.Load(),
		refused: refused.Load(), stalled: stalled.Load(), other: maps.Clone(other), unanswered: unanswered.Load()}
}

// countErr counts a flood publish's error: the quota's 429, or another
// kind.
func countErr(err error, refused *atomic.Int64, other func(string)) {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.Code == 429 {
		refused.Add(1)
		return
	}
	other(errKind(err))
}
