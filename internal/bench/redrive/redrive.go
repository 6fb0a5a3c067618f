package redrive

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

	"github.com/msgplatform/platform/internal/bench"
	"github.com/msgplatform/platform/internal/tlsconf"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/platform/dlq"
	"github.com/msgplatform/platform/redrive"
)

// Options configure one run of the redrive harness; Validate names the
// command's flags.
type Options struct {
	// Count DLQ entries are redriven at an unlimited rate (and as many
	// events published raw); RateCount at Rate events/s.
	Count, RateCount int
	Rate             float64
	Partitions, Keys int
	Window, Runs     int
	// Size is the payload size as the command's flag gives it (1KiB).
	Size string
	// CPUProfile is the prefix of the profiles of the first raw run and
	// the first unlimited redrive (FILE.raw, FILE.redrive).
	CPUProfile string
	SyncAlways bool
	// InProcess is always true: the harness runs on a temporary fabric.
	InProcess bool
}

// Validate reports every problem at once.
func (o Options) Validate(size int) error {
	var errs []error
	if o.Count < 1 || o.Count > redrive.MaxSelection {
		errs = append(errs, fmt.Errorf("--count: must be 1..%d, got %d", redrive.MaxSelection, o.Count))
	}
	if o.RateCount < 1 || o.RateCount > redrive.MaxSelection {
		errs = append(errs, fmt.Errorf("--rate-count: must be 1..%d, got %d", redrive.MaxSelection, o.RateCount))
	}
	if o.Rate <= 0 || o.Rate > redrive.MaxRate {
		errs = append(errs, fmt.Errorf("--rate: must be > 0 and <= %d events/s, got %g", redrive.MaxRate, o.Rate))
	}
	if size < 1 || size > 1<<20 {
		errs = append(errs, fmt.Errorf("--size: must be 1..1MiB, got %d", size))
	}
	if o.Partitions < 1 || o.Partitions > platform.MaxPartitions {
		errs = append(errs, fmt.Errorf("--partitions: must be 1..%d, got %d", platform.MaxPartitions, o.Partitions))
	}
	if o.Keys < 1 {
		errs = append(errs, fmt.Errorf("--keys: must be >= 1, got %d", o.Keys))
	}
	if o.Window < 1 || o.Window > 65536 {
		errs = append(errs, fmt.Errorf("--window: must be 1..65536, got %d", o.Window))
	}
	if o.Runs < 1 || o.Runs > 20 {
		errs = append(errs, fmt.Errorf("--runs: must be 1..20, got %d", o.Runs))
	}
	return errors.Join(errs...)
}

// settings is the line naming what the raw and redrive runs share.
func (o Options) settings(size int) string {
	return fmt.Sprintf("bench.redrive.settings: replicas=3 partitions=%d keys=%d size=%dB window=%d msg_id=both count=%d runs=%d sync_always=%t rated=%d@%g/s",
		o.Partitions, o.Keys, size, o.Window, o.Count, o.Runs, o.SyncAlways, o.RateCount, o.Rate)
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

// Run starts a temporary 3-node fabric, measures raw publish and an
// unlimited redrive of as many DLQ entries in alternating runs, then a
// redrive at o.Rate, and writes the settings line and one 'name: value
// unit' line per figure to out; progress goes to progress.
func Run(ctx context.Context, out, progress io.Writer, o Options, size int) error {
	dir, err := os.MkdirTemp("", "platformctl-bench-redrive-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var res redriveBenchResult
	err = bench.WithFabric(ctx, dir, o.SyncAlways, tlsconf.Config{}, func(nc *nats.Conn, rec *catalog.Reconciler) error {
		res, err = runBenchRedrive(ctx, nc, rec, o, size, progress)
		return err
	})
	if err != nil {
		return err
	}
	bench.PrintLines(out, append([]string{o.settings(size)}, res.lines()...))
	return nil
}

const benchRedriveTopic = "bench-redrive"

func runBenchRedrive(ctx context.Context, nc *nats.Conn, rec *catalog.Reconciler, o Options, size int, progress io.Writer) (redriveBenchResult, error) {
	res := redriveBenchResult{requested: o.Rate}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(max(o.Window*2, 4096)))
	if err != nil {
		return res, err
	}
	spec := platform.DefaultTopicSpec(benchRedriveTopic)
	spec.Partitions = o.Partitions
	if _, err := rec.ApplyTopic(ctx, spec, catalog.ApplyOptions{}); err != nil {
		return res, err
	}
	subject := func(i int) string { return platform.TopicSubject(benchRedriveTopic, "key-"+strconv.Itoa(i%o.Keys)) }
	var ids atomic.Uint64 // unique across runs: a repeated id would be a cheap duplicate
	msgID := func(int) string { return "bench:" + strconv.FormatUint(ids.Add(1), 10) }
	svc, err := redrive.New(js, redrive.Config{Replicas: 3, Window: o.Window})
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
	payload := bench.OrderPayload(size)
	fmt.Fprintf(progress, "bench redrive: %s\n", placement(ctx, js))
	var raws, unlimited, rawCPU, redriveCPU []float64
	next := uint64(1)
	for run := range o.Runs {
		if err := bench.Purge(ctx, js, benchRedriveTopic); err != nil {
			return res, err
		}
		fmt.Fprintf(progress, "bench redrive: run %d/%d: raw publish of %d events\n", run+1, o.Runs, o.Count)
		stop, err := o.profile("raw", run)
		if err != nil {
			return res, err
		}
		cpu0 := bench.ProcessCPU()
		raw, _, err := bench.Publish(ctx, js, bench.PublishOptions{Subject: subject, Count: o.Count, Size: size, Window: o.Window, Runs: 1, MsgID: msgID})
		rawCPU = append(rawCPU, float64(bench.ProcessCPU()-cpu0)/float64(o.Count))
		stop()
		if err != nil {
			return res, fmt.Errorf("bench redrive: raw publish: %w", err)
		}
		fmt.Fprintf(progress, "bench redrive: run %d/%d: raw %.0f msg/s\n", run+1, o.Runs, raw.MsgsPerS)
		raws = append(raws, raw.MsgsPerS)
		if err := bench.Purge(ctx, js, benchRedriveTopic); err != nil {
			return res, err
		}
		fmt.Fprintf(progress, "bench redrive: run %d/%d: filling the DLQ with %d entries\n", run+1, o.Runs, o.Count)
		first, err := fillDLQ(ctx, js, next, o.Count, o, payload)
		if err != nil {
			return res, err
		}
		next += uint64(o.Count)
		stop = func() {}
		start := func() error { // the profile covers what cpu measures
			stop, err = o.profile("redrive", run)
			return err
		}
		var cpu time.Duration
		st, err := timedRedrive(ctx, svc, first, 0, o.Count, progress, &cpu, start)
		redriveCPU = append(redriveCPU, float64(cpu)/float64(o.Count))
		stop()
		if err != nil {
			return res, err
		}
		if err := dlqEmptied(ctx, js, st); err != nil {
			return res, err
		}
		unlimited = append(unlimited, st.Rate)
	}
	res.raw, res.unlimited = bench.MedianUpper(raws), bench.MedianUpper(unlimited)
	res.rawCPU, res.redriveCPU = time.Duration(bench.MedianUpper(rawCPU)), time.Duration(bench.MedianUpper(redriveCPU))

	fmt.Fprintf(progress, "bench redrive: filling the DLQ with %d entries\n", o.RateCount)
	first, err := fillDLQ(ctx, js, next, o.RateCount, o, payload)
	if err != nil {
		return res, err
	}
	st, err := timedRedrive(ctx, svc, first, o.Rate, o.RateCount, progress, nil, nil)
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
func (o Options) profile(phase string, run int) (func(), error) {
	if o.CPUProfile == "" || run > 0 {
		return func() {}, nil
	}
	return bench.StartCPUProfile("--cpuprofile", o.CPUProfile+"."+phase)
}

// fillDLQ writes n DLQ entries of the bench topic, for original sequences
// from.., as the consumer runtime writes them (group bench, permanent),
// and returns the DLQ sequence of the first.
func fillDLQ(ctx context.Context, js jetstream.JetStream, from uint64, n int, o Options, payload []byte) (uint64, error) {
	stream := platform.StreamName(benchRedriveTopic)
	dlqStream, err := js.Stream(ctx, platform.DLQStream(benchRedriveTopic))
	if err != nil {
		return 0, err
	}
	info, err := dlqStream.Info(ctx)
	if err != nil {
		return 0, err
	}
	firstSeq := info.State.LastSeq + 1
	consumer := platform.PartitionConsumer("bench", 0)
	now := time.Now().UTC().Format(time.RFC3339Nano)
	futs := make(chan jetstream.PubAckFuture, o.Window)
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
		key := "key-" + strconv.Itoa(int(seq)%o.Keys)
		h := nats.Header{}
		h.Set("Platform-Event-Id", "bench-"+strconv.FormatUint(seq, 10))
		h.Set(dlq.HeaderReason, "bench: downstream rejected the event")
		h.Set(dlq.HeaderClass, string(dlq.ClassPermanent))
		h.Set(dlq.HeaderAttempts, "1")
		h.Set(dlq.HeaderStream, stream)
		h.Set(dlq.HeaderSeq, strconv.FormatUint(seq, 10))
		h.Set(dlq.HeaderSubject, platform.StoredSubject(benchRedriveTopic, key, o.Partitions))
		h.Set(dlq.HeaderConsumer, consumer)
		h.Set(dlq.HeaderGroup, "bench")
		h.Set(dlq.HeaderFirstFailure, now)
		h.Set(dlq.HeaderLastFailure, now)
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
