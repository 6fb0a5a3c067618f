package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// PublishOptions configure one publish benchmark.
type PublishOptions struct {
	// Subject returns the subject for event i (e.g. "bench.key-<i%1000>").
	Subject func(i int) string
	Count   int // events per run
	Size    int // payload bytes
	Window  int // max publishes in flight
	Runs    int // repetitions; figures are medians
	// MsgID, if set, returns event i's Nats-Msg-Id (the stream then
	// deduplicates, as it does for an outbox relay's publishes).
	MsgID func(i int) string
	// Progress, if set, receives a line every second or so.
	Progress io.Writer
}

// Validate reports every problem at once.
func (o PublishOptions) Validate() error {
	var errs []error
	if o.Subject == nil {
		errs = append(errs, errors.New("subject: must be set"))
	}
	if o.Count < 1 {
		errs = append(errs, fmt.Errorf("count: must be >= 1, got %d", o.Count))
	}
	if o.Size < 1 || o.Size > 8<<20 {
		errs = append(errs, fmt.Errorf("size: must be 1..8MiB, got %d", o.Size))
	}
	if o.Window < 1 || o.Window > 65536 {
		errs = append(errs, fmt.Errorf("window: must be 1..65536, got %d", o.Window))
	}
	if o.Runs < 1 || o.Runs > 100 {
		errs = append(errs, fmt.Errorf("runs: must be 1..100, got %d", o.Runs))
	}
	return errors.Join(errs...)
}

// Result is one run's (or the median of several runs') figures.
type Result struct {
	Msgs     int
	Errors   int
	Elapsed  time.Duration
	MsgsPerS float64
	MiBPerS  float64
	P50      time.Duration
	P99      time.Duration
}

// Publish runs the benchmark o.Runs times with publish and returns the
// median figures and each run's.
func Publish(ctx context.Context, js jetstream.JetStream, o PublishOptions) (Result, []Result, error) {
	if err := o.Validate(); err != nil {
		return Result{}, nil, fmt.Errorf("bench: %w", err)
	}
	payload := make([]byte, o.Size)
	_, _ = rand.Read(payload)
	var runs []Result
	for r := 0; r < o.Runs; r++ {
		res, err := publishOnce(ctx, js, o, payload, r)
		if err != nil {
			return Result{}, runs, err
		}
		runs = append(runs, res)
	}
	return Median(runs), runs, nil
}

func publishOnce(ctx context.Context, js jetstream.JetStream, o PublishOptions, payload []byte, run int) (Result, error) {
	lat := make([]time.Duration, o.Count)
	sem := make(chan struct{}, o.Window)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs int
	var firstErr error
	start := time.Now()
	lastReport := start
	for i := 0; i < o.Count; i++ {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return Result{}, ctx.Err()
		}
		sent := time.Now()
		var fut jetstream.PubAckFuture
		var err error
		if o.MsgID != nil {
			fut, err = js.PublishMsgAsync(&nats.Msg{Subject: o.Subject(i), Data: payload, Header: nats.Header{}}, jetstream.WithMsgID(o.MsgID(i)))
		} else {
			fut, err = js.PublishAsync(o.Subject(i), payload)
		}
		if err != nil {
			<-sem
			mu.Lock()
			errs++
			if firstErr == nil {
				firstErr = err
			}
			mu.Unlock()
			continue
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			select {
			case <-fut.Ok():
				lat[i] = time.Since(sent)
			case err := <-fut.Err():
				mu.Lock()
				errs++
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
				lat[i] = -1
			}
		}(i)
		if o.Progress != nil && time.Since(lastReport) > time.Second {
			lastReport = time.Now()
			fmt.Fprintf(o.Progress, "bench: run %d/%d: %d/%d published (%.0f msg/s)\n", run+1, o.Runs, i, o.Count, float64(i)/time.Since(start).Seconds())
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	if errs > o.Count/100 {
		return Result{}, fmt.Errorf("bench: %d of %d publishes failed; first error: %w", errs, o.Count, firstErr)
	}
	ok := lat[:0]
	for _, l := range lat {
		if l > 0 {
			ok = append(ok, l)
		}
	}
	slices.Sort(ok)
	n := o.Count - errs
	res := Result{
		Msgs:     n,
		Errors:   errs,
		Elapsed:  elapsed,
		MsgsPerS: float64(n) / elapsed.Seconds(),
		MiBPerS:  float64(n) * float64(o.Size) / elapsed.Seconds() / (1 << 20),
		P50:      Percentile(ok, 0.50),
		P99:      Percentile(ok, 0.99),
	}
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "bench: run %d/%d: %.0f msg/s, p50 %s, p99 %s\n", run+1, o.Runs, res.MsgsPerS, res.P50, res.P99)
	}
	return res, nil
}

// Percentile returns the q-quantile (0..1) of sorted values (nearest rank).
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}

// Median returns the per-figure median of runs.
func Median(runs []Result) Result {
	if len(runs) == 0 {
		return Result{}
	}
	med := func(get func(Result) float64) float64 {
		v := make([]float64, len(runs))
		for i, r := range runs {
			v[i] = get(r)
		}
		return MedianOf(v)
	}
	return Result{
		Msgs:     int(med(func(r Result) float64 { return float64(r.Msgs) })),
		Errors:   int(med(func(r Result) float64 { return float64(r.Errors) })),
		Elapsed:  time.Duration(med(func(r Result) float64 { return float64(r.Elapsed) })),
		MsgsPerS: med(func(r Result) float64 { return r.MsgsPerS }),
		MiBPerS:  med(func(r Result) float64 { return r.MiBPerS }),
		P50:      time.Duration(med(func(r Result) float64 { return float64(r.P50) })),
		P99:      time.Duration(med(func(r Result) float64 { return float64(r.P99) })),
	}
}

// Lines formats r as "name: value unit" lines under prefix.
func (r Result) Lines(prefix string) []string {
	return []string{
		fmt.Sprintf("%s.msgs_per_sec: %.0f msg/s", prefix, r.MsgsPerS),
		fmt.Sprintf("%s.mib_per_sec: %.2f MiB/s", prefix, r.MiBPerS),
		fmt.Sprintf("%s.ack_p50: %.3f ms", prefix, float64(r.P50)/float64(time.Millisecond)),
		fmt.Sprintf("%s.ack_p99: %.3f ms", prefix, float64(r.P99)/float64(time.Millisecond)),
	}
}

// MedianOf returns the median of values (0 for none); values is not
// modified.
func MedianOf(values []float64) float64 {
	if len(values) == 0 {
		return 0
	}
	v := slices.Clone(values)
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}
