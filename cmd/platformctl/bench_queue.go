package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/internal/bench"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/consumer"
)

type benchQueueOptions struct {
	count, size, concurrency, runs int
	work                           time.Duration
	inProcess                      bool
	cpuProfile                     string
}

func newBenchQueueCmd(g *globalOptions) *cobra.Command {
	o := benchQueueOptions{}
	cmd := &cobra.Command{
		Use:   "queue",
		Short: "Work-queue workers (leases, one job per free slot) vs a raw nats.go consumer",
		Long: `Queues --count jobs on an R3 work queue, then drains them --runs times
with each of two consumers, interleaved (raw first in odd runs, workers
first in even runs), each handler taking --work per job on --concurrency
goroutines:

  raw:      nats.go Consume on the queue's consumer, up to --concurrency
            jobs prefetched, a pool of --concurrency handlers, one ack each
            (what a service writes by hand: no lease renewal, no sessions,
            no retry policy or dead letters);
  workers:  platform.Workers (Concurrency --concurrency): a job is claimed
            only when a handler is free, its lease renewed while it runs,
            its session recorded, its outcome settled by the retry policy.

Prints each run's jobs/s and ratio under bench.queue.runN, then one median
line per figure (the ratio is the median of the per-run ratios). Progress
goes to stderr.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return usageError{err}
			}
			return profiled(o.cpuProfile, func() error { return runBenchQueue(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), g, o) })
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.count, "count", 5000, "jobs per run and consumer")
	f.IntVar(&o.size, "size", 1024, "payload bytes")
	f.IntVar(&o.concurrency, "concurrency", 8, "handlers running at once")
	f.DurationVar(&o.work, "work", time.Millisecond, "time each handler takes per job")
	f.IntVar(&o.runs, "runs", 3, "runs, raw and workers in each (alternating order); figures are medians")
	f.BoolVar(&o.inProcess, "in-process", false, "start a temporary 3-node fabric instead of using --server")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole bench to this file")
	return cmd
}

func (o benchQueueOptions) validate() error {
	var errs []error
	if o.count < 1 || o.size < 1 {
		errs = append(errs, fmt.Errorf("--count and --size must be >= 1, got %d and %d", o.count, o.size))
	}
	if o.concurrency < 1 || o.concurrency > 1024 {
		errs = append(errs, fmt.Errorf("--concurrency must be 1..1024, got %d", o.concurrency))
	}
	if o.work < 0 || o.work > time.Minute {
		errs = append(errs, fmt.Errorf("--work must be 0..1m, got %s", o.work))
	}
	if o.runs < 1 || o.runs > 100 {
		errs = append(errs, fmt.Errorf("--runs must be 1..100, got %d", o.runs))
	}
	return errors.Join(errs...)
}

// queueDrain is one way of draining the bench queue: it returns once
// count jobs were handled.
type queueDrain func(ctx context.Context, count int, handle func()) error

func runBenchQueue(ctx context.Context, out, progress io.Writer, g *globalOptions, o benchQueueOptions) error {
	nc, closeNC, err := benchConnect(ctx, g, o.inProcess)
	if err != nil {
		return err
	}
	defer closeNC()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1024))
	if err != nil {
		return err
	}
	name := fmt.Sprintf("bench-queue-%d", time.Now().UnixNano()%1_000_000)
	spec := platform.DefaultQueueSpec(name)
	spec.Replicas, spec.Owner = 3, "platformctl-bench"
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = platform.NewReconciler(js, platform.ReconcilerOptions{}).ApplyQueue(actx, spec, platform.ApplyOptions{AllowReducedReplicas: true})
	cancel()
	if err != nil {
		return fmt.Errorf("create bench queue %s: %w", name, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(dctx, platform.StreamName(name))
		_ = js.DeleteStream(dctx, platform.DLQStream(name))
		_ = js.DeleteStream(dctx, platform.DLQEventsStream(name))
	}()
	cons, err := js.Consumer(ctx, platform.StreamName(name), platform.QueueConsumer)
	if err != nil {
		return err
	}
	work := func() {
		if o.work > 0 {
			time.Sleep(o.work)
		}
	}
	drains := []struct {
		name  string
		drain queueDrain
	}{
		{"raw", rawQueueDrain(cons, o.concurrency, work)},
		{"workers", workersQueueDrain(js, name, o.concurrency, work)},
	}
	fmt.Fprintf(out, "bench.queue.params: count=%d size=%dB concurrency=%d work=%s replicas=3 lease=%s\n",
		o.count, o.size, o.concurrency, o.work, spec.Lease)
	payload := make([]byte, o.size)
	rates := map[string][]float64{}
	var ratios []float64
	for run := 1; run <= o.runs; run++ {
		got := map[string]float64{}
		for i := range drains {
			d := drains[i]
			if run%2 == 0 {
				d = drains[len(drains)-1-i]
			}
			fmt.Fprintf(progress, "bench queue: run %d/%d: queueing %d jobs for %s\n", run, o.runs, o.count, d.name)
			for j := range o.count {
				if _, err := js.PublishAsync(fmt.Sprintf("%s.job-%d", name, j), payload); err != nil {
					return fmt.Errorf("bench queue: queue jobs: %w", err)
				}
			}
			select {
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
				return ctx.Err()
			}
			var handled atomic.Int64
			dctx, stopWatch := watchQueueDrain(ctx, progress, fmt.Sprintf("bench queue: run %d/%d: %s", run, o.runs, d.name), &handled, o.count)
			start := time.Now()
			err := d.drain(dctx, o.count, func() { handled.Add(1) })
			elapsed := time.Since(start)
			stopWatch()
			if cause := context.Cause(dctx); err != nil && cause != nil && ctx.Err() == nil {
				err = cause
			}
			if err != nil {
				return fmt.Errorf("bench queue: %s: %w", d.name, err)
			}
			if err := waitQueueEmpty(ctx, js, platform.StreamName(name)); err != nil {
				return fmt.Errorf("bench queue: %s: %w", d.name, err)
			}
			rate := float64(o.count) / elapsed.Seconds()
			got[d.name] = rate
			rates[d.name] = append(rates[d.name], rate)
			fmt.Fprintf(out, "bench.queue.run%d.%s.jobs_per_sec: %.0f jobs/s\n", run, d.name, rate)
		}
		r := got["workers"] / got["raw"]
		ratios = append(ratios, r)
		fmt.Fprintf(out, "bench.queue.run%d.workers_vs_raw_ratio: %.2f x\n", run, r)
	}
	for _, d := range drains {
		fmt.Fprintf(out, "bench.queue.median.%s.jobs_per_sec: %.0f jobs/s\n", d.name, bench.MedianOf(rates[d.name]))
	}
	fmt.Fprintf(out, "bench.queue.median.workers_vs_raw_ratio: %.2f x\n", bench.MedianOf(ratios))
	return nil
}

// rawQueueDrain consumes with nats.go Consume (up to concurrency jobs
// prefetched) into a pool of concurrency handlers, each acking its job.
func rawQueueDrain(cons jetstream.Consumer, concurrency int, work func()) queueDrain {
	return func(ctx context.Context, count int, handle func()) error {
		jobs := make(chan jetstream.Msg)
		var done atomic.Int64
		finished := make(chan struct{})
		var pool sync.WaitGroup
		for range concurrency {
			pool.Go(func() {
				for m := range jobs {
					work()
					_ = m.Ack()
					handle()
					if done.Add(1) == int64(count) {
						close(finished)
					}
				}
			})
		}
		cc, err := cons.Consume(func(m jetstream.Msg) { jobs <- m }, jetstream.PullMaxMessages(concurrency))
		if err != nil {
			close(jobs)
			return err
		}
		defer func() {
			cc.Stop()
			<-cc.Closed()
			close(jobs)
			pool.Wait()
		}()
		select {
		case <-finished:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("handled %d of %d: %w", done.Load(), count, ctx.Err())
		}
	}
}

// workersQueueDrain runs platform.Workers on the queue until count jobs
// were handled, then closes them.
func workersQueueDrain(js jetstream.JetStream, queue string, concurrency int, work func()) queueDrain {
	return func(ctx context.Context, count int, handle func()) error {
		var done atomic.Int64
		finished := make(chan struct{})
		w, err := consumer.NewWorkers(js, consumer.WorkersConfig{Queue: queue, Concurrency: concurrency, NoDLQRouter: true},
			func(context.Context, *consumer.Message) error {
				work()
				handle()
				if done.Add(1) == int64(count) {
					close(finished)
				}
				return nil
			})
		if err != nil {
			return err
		}
		if err := w.Start(ctx); err != nil {
			return err
		}
		defer func() { _ = w.Close(context.WithoutCancel(ctx)) }()
		select {
		case <-finished:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("handled %d of %d: %w", done.Load(), count, ctx.Err())
		}
	}
}

// waitQueueEmpty waits until the work-queue stream holds no job (every
// ack applied), so the next drain starts from what it queues.
func waitQueueEmpty(ctx context.Context, js jetstream.JetStream, stream string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		s, err := js.Stream(ctx, stream)
		if err == nil && s.CachedInfo().State.Msgs == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("%d jobs still queued", s.CachedInfo().State.Msgs)
			}
			return fmt.Errorf("queue not empty after 30s: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// watchQueueDrain reports a drain's progress every second and ends the
// returned ctx, with the reason, when nothing moves for a minute.
func watchQueueDrain(ctx context.Context, progress io.Writer, what string, handled *atomic.Int64, count int) (context.Context, func()) {
	dctx, cancel := context.WithCancelCause(ctx)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		start, last, lastMove := time.Now(), int64(-1), time.Now()
		for {
			select {
			case <-stop:
				return
			case <-dctx.Done():
				return
			case <-t.C:
			}
			n := handled.Load()
			fmt.Fprintf(progress, "%s: %d/%d handled (%.0f jobs/s)\n", what, n, count, float64(n)/time.Since(start).Seconds())
			if n != last {
				last, lastMove = n, time.Now()
			} else if time.Since(lastMove) > time.Minute {
				cancel(fmt.Errorf("stuck at %d of %d jobs for a minute", n, count))
				return
			}
		}
	})
	return dctx, func() { close(stop); wg.Wait(); cancel(nil) }
}
