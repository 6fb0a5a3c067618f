package queue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/bench"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/platform/consumer"
)

// Options configure one run of the queue harness; Validate names the
// command's flags.
type Options struct {
	Count, Size, Concurrency, Runs int
	Work                           time.Duration
	// InProcess starts a temporary 3-node fabric instead of using the
	// remote platform.
	InProcess bool
	// CPUProfile is the file the command profiles the whole run to.
	CPUProfile string
}

// Validate reports every problem at once.
func (o Options) Validate() error {
	errs := []error{bench.CheckCountSize(o.Count, o.Size)}
	if o.Concurrency < 1 || o.Concurrency > 1024 {
		errs = append(errs, fmt.Errorf("--concurrency must be 1..1024, got %d", o.Concurrency))
	}
	if o.Work < 0 || o.Work > time.Minute {
		errs = append(errs, fmt.Errorf("--work must be 0..1m, got %s", o.Work))
	}
	return errors.Join(append(errs, bench.CheckRuns(o.Runs))...)
}

// queueDrain is one way of draining the bench queue: it returns once
// count jobs were handled.
type queueDrain func(ctx context.Context, count int, handle func()) error

// queueSide is a named queueDrain: one side of the comparison.
type queueSide struct {
	name  string
	drain queueDrain
}

// Name is d's name in the figures.
func (d queueSide) Name() string { return d.name }

// Run queues o.Count jobs and drains them with a raw nats.go consumer
// and with consumer.Workers, o.Runs times interleaved, and writes each
// run's figures and the medians to out; progress goes to progress.
func Run(ctx context.Context, out, progress io.Writer, remote bench.Remote, o Options) error {
	nc, closeNC, err := bench.Connect(ctx, remote, o.InProcess)
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
	_, err = catalog.NewReconciler(js, catalog.ReconcilerOptions{}).ApplyQueue(actx, spec, catalog.ApplyOptions{AllowReducedReplicas: true})
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
		if o.Work > 0 {
			time.Sleep(o.Work)
		}
	}
	drains := []queueSide{
		{"raw", rawQueueDrain(cons, o.Concurrency, work)},
		{"workers", workersQueueDrain(js, name, o.Concurrency, work)},
	}
	fmt.Fprintf(out, "bench.queue.params: count=%d size=%dB concurrency=%d work=%s replicas=3 lease=%s\n",
		o.Count, o.Size, o.Concurrency, o.Work, spec.Lease)
	payload := make([]byte, o.Size)
	res, err := bench.Interleave(o.Runs, drains, queueSide.Name, func(run int, d queueSide) (float64, error) {
		fmt.Fprintf(progress, "bench queue: run %d/%d: queueing %d jobs for %s\n", run, o.Runs, o.Count, d.name)
		for j := range o.Count {
			if _, err := js.PublishAsync(fmt.Sprintf("%s.job-%d", name, j), payload); err != nil {
				return 0, fmt.Errorf("bench queue: queue jobs: %w", err)
			}
		}
		select {
		case <-js.PublishAsyncComplete():
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		var handled atomic.Int64
		dctx, stopWatch := watchQueueDrain(ctx, progress, fmt.Sprintf("bench queue: run %d/%d: %s", run, o.Runs, d.name), &handled, o.Count)
		start := time.Now()
		err := d.drain(dctx, o.Count, func() { handled.Add(1) })
		elapsed := time.Since(start)
		stopWatch()
		if cause := context.Cause(dctx); err != nil && cause != nil && ctx.Err() == nil {
			err = cause
		}
		if err != nil {
			return 0, fmt.Errorf("bench queue: %s: %w", d.name, err)
		}
		if err := waitQueueEmpty(ctx, js, platform.StreamName(name)); err != nil {
			return 0, fmt.Errorf("bench queue: %s: %w", d.name, err)
		}
		rate := float64(o.Count) / elapsed.Seconds()
		fmt.Fprintf(out, "bench.queue.run%d.%s.jobs_per_sec: %.0f jobs/s\n", run, d.name, rate)
		return rate, nil
	}, func(run int, ratios map[string]float64) {
		fmt.Fprintf(out, "bench.queue.run%d.workers_vs_raw_ratio: %.2f x\n", run, ratios["workers"])
	})
	if err != nil {
		return err
	}
	for _, d := range drains {
		fmt.Fprintf(out, "bench.queue.median.%s.jobs_per_sec: %.0f jobs/s\n", d.name, bench.MedianOf(res.Rates[d.name]))
	}
	fmt.Fprintf(out, "bench.queue.median.workers_vs_raw_ratio: %.2f x\n", bench.MedianOf(res.Ratios["workers"]))
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

// workersQueueDrain runs consumer.Workers on the queue until count jobs
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
