package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/internal/bench"
	"github.com/msgplatform/platform/internal/tlsconf"
	"github.com/msgplatform/platform/internal/units"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/redrive"
)

type benchRedriveOptions struct {
	count, rateCount, partitions, keys, window, runs int
	rate                                             float64
	size, cpuProfile                                 string
	syncAlways, inProcess                            bool
}

func newBenchRedriveCmd(_ *globalOptions) *cobra.Command {
	o := benchRedriveOptions{}
	cmd := &cobra.Command{
		Use:   "redrive",
		Short: "Redrive throughput at an unlimited rate vs raw publish, and the rate held at --rate",
		Long: `Starts a temporary 3-node fabric and, on it, in one run:

  raw:       publishes --count events of --size bytes to an R3 bench topic
             (async, --window in flight, each with a unique Nats-Msg-Id as
             a redrive's events have), as bench publish;
  unlimited: fills the topic's DLQ with --count entries (as the consumer
             runtime writes them) and redrives them all at an unlimited rate
             through the redrive service (no sample, the same --window of
             publishes in flight), timing the sending (the run's own Sent /
             Sending, which covers reading the entries from the DLQ and
             deleting the sent ones: a run completes only once they are
             gone, and the bench checks the DLQ is empty after each run);
  rated:     fills the DLQ with --rate-count entries and redrives them at
             --rate events/s, reporting achieved / requested.

The raw and unlimited measurements alternate, --runs times each, into an
emptied topic, and their figures are the medians (the ratio is median /
median). Goals: redrive at an unlimited rate >= 0.8 x raw publish; the
rated run within 0.95..1.05 of --rate. Progress goes to stderr; to stdout
one line of settings (bench.redrive.settings), then one figure per line.
The bench always starts its own fabric (--in-process is the only mode).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			size, err := units.ParseSize(o.size)
			if err != nil {
				return usageError{fmt.Errorf("--size: %w", err)}
			}
			if !o.inProcess {
				return usageError{errors.New("--in-process=false: bench redrive always runs on a temporary in-process fabric")}
			}
			if err := o.validate(int(size)); err != nil {
				return usageError{err}
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			dir, err := os.MkdirTemp("", "platformctl-bench-redrive-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			var res redriveBenchResult
			err = bench.WithFabric(ctx, dir, o.syncAlways, tlsconf.Config{}, func(nc *nats.Conn, rec *platform.Reconciler) error {
				res, err = runBenchRedrive(ctx, nc, rec, o, int(size), cmd.ErrOrStderr())
				return err
			})
			if err != nil {
				return err
			}
			bench.PrintLines(cmd.OutOrStdout(), append([]string{o.settings(int(size))}, res.lines()...))
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.count, "count", 20000, "DLQ entries redriven at an unlimited rate (and events of the raw publish)")
	f.IntVar(&o.rateCount, "rate-count", 10000, "DLQ entries redriven at --rate")
	f.Float64Var(&o.rate, "rate", 1000, "events/s of the rated run")
	f.StringVar(&o.size, "size", "1KiB", "payload size")
	f.IntVar(&o.partitions, "partitions", 24, "partitions of the bench topic")
	f.IntVar(&o.keys, "keys", 1024, "distinct keys")
	f.IntVar(&o.window, "window", 512, "raw publishes (and DLQ fills) in flight")
	f.IntVar(&o.runs, "runs", 3, "raw publish and unlimited redrive runs (alternating); figures are medians")
	f.BoolVar(&o.syncAlways, "sync-always", true, "fsync every write (the platform default)")
	f.BoolVar(&o.inProcess, "in-process", true, "start a temporary 3-node fabric (always: bench redrive has no other mode)")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write CPU profiles of the first raw run (FILE.raw) and of the first unlimited redrive (FILE.redrive, from its run to its completion: the request's freeze excluded, as from its CPU figure); the fabric is in-process, so they include the servers")
	return cmd
}

func (o benchRedriveOptions) validate(size int) error {
	var errs []error
	if o.count < 1 || o.count > redrive.MaxSelection {
		errs = append(errs, fmt.Errorf("--count: must be 1..%d, got %d", redrive.MaxSelection, o.count))
	}
	if o.rateCount < 1 || o.rateCount > redrive.MaxSelection {
		errs = append(errs, fmt.Errorf("--rate-count: must be 1..%d, got %d", redrive.MaxSelection, o.rateCount))
	}
	if o.rate <= 0 || o.rate > redrive.MaxRate {
		errs = append(errs, fmt.Errorf("--rate: must be > 0 and <= %d events/s, got %g", redrive.MaxRate, o.rate))
	}
	if size < 1 || size > 1<<20 {
		errs = append(errs, fmt.Errorf("--size: must be 1..1MiB, got %d", size))
	}
	if o.partitions < 1 || o.partitions > platform.MaxPartitions {
		errs = append(errs, fmt.Errorf("--partitions: must be 1..%d, got %d", platform.MaxPartitions, o.partitions))
	}
	if o.keys < 1 {
		errs = append(errs, fmt.Errorf("--keys: must be >= 1, got %d", o.keys))
	}
	if o.window < 1 || o.window > 65536 {
		errs = append(errs, fmt.Errorf("--window: must be 1..65536, got %d", o.window))
	}
	if o.runs < 1 || o.runs > 20 {
		errs = append(errs, fmt.Errorf("--runs: must be 1..20, got %d", o.runs))
	}
	return errors.Join(errs...)
}

// settings is the line naming what the raw and redrive runs share.
func (o benchRedriveOptions) settings(size int) string {
	return fmt.Sprintf("bench.redrive.settings: replicas=3 partitions=%d keys=%d size=%dB window=%d msg_id=both count=%d runs=%d sync_always=%t rated=%d@%g/s",
		o.partitions, o.keys, size, o.window, o.count, o.runs, o.syncAlways, o.rateCount, o.rate)
}

// redriveBenchResult is the figures of one bench redrive.
type redriveBenchResult struct {
	raw, unlimited float64 // msg/s
	// rawCPU and redriveCPU are the process's CPU time per event (the
	// fabric is in-process: servers included), medians; 0 where not
	// measured.
	rawCPU, redriveCPU  time.Duration
	requested, achieved float64 // events/s of the rated run
}

func (r redriveBenchResult) lines() []string {
	ratio, cpuRatio := 0.0, 0.0
	if r.raw > 0 {
		ratio = r.unlimited / r.raw
	}
	if r.rawCPU > 0 {
		cpuRatio = float64(r.redriveCPU) / float64(r.rawCPU)
	}
	return []string{
		fmt.Sprintf("bench.redrive.raw_publish_msgs_per_sec: %.0f msg/s", r.raw),
		fmt.Sprintf("bench.redrive.unlimited_msgs_per_sec: %.0f msg/s", r.unlimited),
		fmt.Sprintf("bench.redrive.ratio_vs_raw: %.3f ratio", ratio),
		fmt.Sprintf("bench.redrive.raw_cpu_per_event: %.1f us", float64(r.rawCPU.Nanoseconds())/1e3),
		fmt.Sprintf("bench.redrive.unlimited_cpu_per_event: %.1f us", float64(r.redriveCPU.Nanoseconds())/1e3),
		fmt.Sprintf("bench.redrive.cpu_ratio_vs_raw: %.3f ratio", cpuRatio),
		fmt.Sprintf("bench.redrive.rate_requested: %.0f msg/s", r.requested),
		fmt.Sprintf("bench.redrive.rate_achieved: %.1f msg/s", r.achieved),
		fmt.Sprintf("bench.redrive.rate_ratio: %.3f ratio", r.achieved/r.requested),
	}
}

const benchRedriveTopic = "bench-redrive"

func runBenchRedrive(ctx context.Context, nc *nats.Conn, rec *platform.Reconciler, o benchRedriveOptions, size int, progress io.Writer) (redriveBenchResult, error) {
	res := redriveBenchResult{requested: o.rate}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(max(o.window*2, 4096)))
	if err != nil {
		return res, err
	}
	spec := platform.DefaultTopicSpec(benchRedriveTopic)
	spec.Partitions = o.partitions
	if _, err := rec.ApplyTopic(ctx, spec, platform.ApplyOptions{}); err != nil {
		return res, err
	}
	subject := func(i int) string { return platform.TopicSubject(benchRedriveTopic, "key-"+strconv.Itoa(i%o.keys)) }
	var ids atomic.Uint64 // unique across runs: a repeated id would be a cheap duplicate
	msgID := func(int) string { return "bench:" + strconv.FormatUint(ids.Add(1), 10) }
	svc, err := redrive.New(js, redrive.Config{Replicas: 3, Window: o.window})
	if err != nil {
		return res, err
	}
	if err := svc.Start(ctx); err != nil {
		return res, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = svc.Close(cctx)
	}()
	payload := benchOrderPayload(size)
	fmt.Fprintf(progress, "bench redrive: %s\n", placement(ctx, js))
	var raws, unlimited, rawCPU, redriveCPU []float64
	next := uint64(1)
	for run := range o.runs {
		if err := bench.Purge(ctx, js, benchRedriveTopic); err != nil {
			return res, err
		}
		fmt.Fprintf(progress, "bench redrive: run %d/%d: raw publish of %d events\n", run+1, o.runs, o.count)
		stop, err := o.profile("raw", run)
		if err != nil {
			return res, err
		}
		cpu0 := bench.ProcessCPU()
		raw, _, err := bench.Publish(ctx, js, bench.PublishOptions{Subject: subject, Count: o.count, Size: size, Window: o.window, Runs: 1, MsgID: msgID})
		rawCPU = append(rawCPU, float64(bench.ProcessCPU()-cpu0)/float64(o.count))
		stop()
		if err != nil {
			return res, fmt.Errorf("bench redrive: raw publish: %w", err)
		}
		fmt.Fprintf(progress, "bench redrive: run %d/%d: raw %.0f msg/s\n", run+1, o.runs, raw.MsgsPerS)
		raws = append(raws, raw.MsgsPerS)
		if err := bench.Purge(ctx, js, benchRedriveTopic); err != nil {
			return res, err
		}
		fmt.Fprintf(progress, "bench redrive: run %d/%d: filling the DLQ with %d entries\n", run+1, o.runs, o.count)
		first, err := fillDLQ(ctx, js, next, o.count, o, payload)
		if err != nil {
			return res, err
		}
		next += uint64(o.count)
		stop = func() {}
		start := func() error { // the profile covers what cpu measures
			stop, err = o.profile("redrive", run)
			return err
		}
		var cpu time.Duration
		st, err := timedRedrive(ctx, svc, first, 0, o.count, progress, &cpu, start)
		redriveCPU = append(redriveCPU, float64(cpu)/float64(o.count))
		stop()
		if err != nil {
			return res, err
		}
		if err := dlqEmptied(ctx, js, st); err != nil {
			return res, err
		}
		unlimited = append(unlimited, st.Rate)
	}
	res.raw, res.unlimited = medianOf(raws), medianOf(unlimited)
	res.rawCPU, res.redriveCPU = time.Duration(medianOf(rawCPU)), time.Duration(medianOf(redriveCPU))

	fmt.Fprintf(progress, "bench redrive: filling the DLQ with %d entries\n", o.rateCount)
	first, err := fillDLQ(ctx, js, next, o.rateCount, o, payload)
	if err != nil {
		return res, err
	}
	st, err := timedRedrive(ctx, svc, first, o.rate, o.rateCount, progress, nil, nil)
	if err != nil {
		return res, err
	}
	if err := dlqEmptied(ctx, js, st); err != nil {
		return res, err
	}
	res.achieved = st.Rate
	return res, nil
}

// profile starts the CPU profile of the first run of a phase (raw or
// redrive) if --cpuprofile is set; the returned func stops it.
func (o benchRedriveOptions) profile(phase string, run int) (func(), error) {
	if o.cpuProfile == "" || run > 0 {
		return func() {}, nil
	}
	return bench.StartCPUProfile("--cpuprofile", o.cpuProfile+"."+phase)
}

// fillDLQ writes n DLQ entries of the bench topic, for original sequences
// from.., as the consumer runtime writes them (group bench, permanent),
// and returns the DLQ sequence of the first.
func fillDLQ(ctx context.Context, js jetstream.JetStream, from uint64, n int, o benchRedriveOptions, payload []byte) (uint64, error) {
	stream := platform.StreamName(benchRedriveTopic)
	dlq, err := js.Stream(ctx, platform.DLQStream(benchRedriveTopic))
	if err != nil {
		return 0, err
	}
	info, err := dlq.Info(ctx)
	if err != nil {
		return 0, err
	}
	firstSeq := info.State.LastSeq + 1
	consumer := platform.PartitionConsumer("bench", 0)
	now := time.Now().UTC().Format(time.RFC3339Nano)
	futs := make(chan jetstream.PubAckFuture, o.window)
	errc := make(chan error, 1)
	go func() {
		defer close(errc)
		for f := range futs {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				errc <- fmt.Errorf("bench redrive: fill DLQ: %w", err)
				for range futs {
				}
				return
			case <-ctx.Done():
				errc <- ctx.Err()
				for range futs {
				}
				return
			}
		}
	}()
	for i := range n {
		seq := from + uint64(i)
		key := "key-" + strconv.Itoa(int(seq)%o.keys)
		h := nats.Header{}
		h.Set("Platform-Event-Id", "bench-"+strconv.FormatUint(seq, 10))
		h.Set(platform.HeaderDLQReason, "bench: downstream rejected the event")
		h.Set(platform.HeaderDLQClass, string(platform.ClassPermanent))
		h.Set(platform.HeaderDLQAttempts, "1")
		h.Set(platform.HeaderDLQStream, stream)
		h.Set(platform.HeaderDLQSeq, strconv.FormatUint(seq, 10))
		h.Set(platform.HeaderDLQSubject, platform.StoredSubject(benchRedriveTopic, key, o.partitions))
		h.Set(platform.HeaderDLQConsumer, consumer)
		h.Set(platform.HeaderDLQGroup, "bench")
		h.Set(platform.HeaderDLQFirstFailure, now)
		h.Set(platform.HeaderDLQLastFailure, now)
		f, err := js.PublishMsgAsync(&nats.Msg{Subject: platform.DLQSubject(stream, consumer, seq), Header: h, Data: payload})
		if err != nil {
			close(futs)
			<-errc
			return 0, fmt.Errorf("bench redrive: fill DLQ: %w", err)
		}
		select {
		case futs <- f:
		case err := <-errc:
			close(futs)
			return 0, err
		}
	}
	close(futs)
	return firstSeq, <-errc
}

// dlqEmptied checks that a completed run left none of the bench DLQ's
// entries behind (every one was selected): a run only completes once the
// entries it sent are deleted from the DLQ.
func dlqEmptied(ctx context.Context, js jetstream.JetStream, st redrive.Status) error {
	dlq, err := js.Stream(ctx, platform.DLQStream(benchRedriveTopic))
	if err != nil {
		return err
	}
	info, err := dlq.Info(ctx)
	if err != nil {
		return err
	}
	if info.State.Msgs != 0 {
		return fmt.Errorf("bench redrive: run %s completed (%d sent) but %d entries are still in DLQ %s", st.ID, st.Progress.Sent, info.State.Msgs, dlq.CachedInfo().Config.Name)
	}
	return nil
}

// timedRedrive redrives the entries of the bench DLQ from DLQ sequence
// from on at rate (0: unlimited), with no sample, and returns the
// completed run's status; cpu, if set, gets the process CPU time from
// the run's start to its completion (the request's freeze excluded);
// start, if set, is called just before the run starts.
func timedRedrive(ctx context.Context, svc *redrive.Service, from uint64, rate float64, n int, progress io.Writer, cpu *time.Duration, start func() error) (redrive.Status, error) {
	st, err := svc.Submit(ctx, redrive.Request{DLQ: benchRedriveTopic, Selection: redrive.Selection{FromSeq: from}, Rate: rate,
		MaxFailureRate: 1, Reason: "bench redrive", Requester: "platformctl:bench"})
	if err != nil {
		return st, err
	}
	if st.Total != n {
		return st, fmt.Errorf("bench redrive: request froze %d entries, want %d", st.Total, n)
	}
	label := "unlimited"
	if rate > 0 {
		label = fmt.Sprintf("%g/s", rate)
	}
	fmt.Fprintf(progress, "bench redrive: redriving %d entries at %s (%s)\n", n, label, st.ID)
	if start != nil {
		if err := start(); err != nil {
			return st, err
		}
	}
	cpu0 := bench.ProcessCPU()
	if _, err := svc.Run(ctx, st.ID, "platformctl:bench", "bench"); err != nil {
		return st, err
	}
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		st, err = svc.Get(ctx, st.ID)
		if err != nil {
			return st, err
		}
		switch {
		case st.State == redrive.StateCompleted:
			if cpu != nil {
				*cpu = bench.ProcessCPU() - cpu0
			}
			fmt.Fprintf(progress, "bench redrive: %d sent in %s: %.0f events/s\n", st.Progress.Sent, st.Progress.Sending.Round(time.Millisecond), st.Rate)
			return st, nil
		case st.State.Terminal() || st.State == redrive.StatePaused:
			return st, fmt.Errorf("bench redrive: run %s ended %s: %s", st.ID, st.State, st.PauseReason)
		}
		if time.Since(last) >= time.Second {
			last = time.Now()
			fmt.Fprintf(progress, "bench redrive: %d/%d sent, %.0f events/s\n", st.Progress.Next, st.Total, st.Rate)
		}
	}
}

// placement names the server the bench's client is connected to and the
// leaders of the bench topic's stream and of its DLQ: a run whose leaders
// sit elsewhere moves each event over a route once more, so figures of
// fabrics with different placements differ (compare like with like).
func placement(ctx context.Context, js jetstream.JetStream) string {
	leader := func(name string) string {
		st, err := js.Stream(ctx, name)
		if err != nil {
			return "?"
		}
		info, err := st.Info(ctx)
		if err != nil || info.Cluster == nil {
			return "?"
		}
		return info.Cluster.Leader
	}
	return fmt.Sprintf("placement: client on %s, stream leader %s, DLQ leader %s", js.Conn().ConnectedServerName(),
		leader(platform.StreamName(benchRedriveTopic)), leader(platform.DLQStream(benchRedriveTopic)))
}
