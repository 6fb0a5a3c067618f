package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/internal/bench"
	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/units"
	"github.com/msgplatform/platform/platform"
)

func newBenchCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmarks; each reports figures as 'name: value unit', one per line",
	}
	cmd.AddCommand(newBenchPublishCmd(g), newBenchOutboxCmd(g), newBenchInboxCmd(g))
	cmd.AddCommand(newBenchGroupCmd(g))
	cmd.AddCommand(newBenchQuotaCmd(g))
	return cmd
}

type benchPublishOptions struct {
	count, window, runs, partitions, replicas, keys int
	size                                            string
	topic                                           string
	keep, inProcess                                 bool
}

func newBenchPublishCmd(g *globalOptions) *cobra.Command {
	o := benchPublishOptions{}
	cmd := &cobra.Command{
		Use:   "publish",
		Short: "Raw JetStream publish of 1 KiB events to an R3 topic: msgs/s, MiB/s, ack p50/p99",
		Long: `Publishes --count events of --size bytes to a bench topic (R3, --partitions
partitions) with async publish and up to --window acks in flight, --runs
times, and prints the median figures. This is the baseline every other
benchmark reports a ratio against.

By default it runs against the platform at --server. With --in-process it
starts two temporary 3-node fabrics itself, one with sync_always on and one
with it off, and prints both and their ratio.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			size, err := units.ParseSize(o.size)
			if err != nil {
				return usageError{fmt.Errorf("--size: %w", err)}
			}
			popts := bench.PublishOptions{
				Count: o.count, Size: int(size), Window: o.window, Runs: o.runs,
				Progress: cmd.ErrOrStderr(),
				Subject:  func(i int) string { return platform.TopicSubject(o.topic, fmt.Sprintf("key-%d", i%o.keys)) },
			}
			if err := popts.Validate(); err != nil {
				return usageError{err}
			}
			out := cmd.OutOrStdout()
			if o.inProcess {
				return benchInProcess(cmd.Context(), out, o, popts)
			}
			nc, err := g.connect()
			if err != nil {
				return err
			}
			defer nc.Close()
			res, err := benchAgainst(cmd.Context(), nc, o, popts, func(ctx context.Context, spec platform.TopicSpec) error {
				return control.Call(ctx, nc, control.SubjTopicApply, control.ApplyTopicRequest{
					Spec: spec, Options: platform.ApplyOptions{AllowReducedReplicas: true},
				}, nil)
			})
			if err != nil {
				return err
			}
			printLines(out, res.Lines("bench.publish"))
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.count, "count", 50000, "events per run")
	f.StringVar(&o.size, "size", "1KiB", "payload size (1024, 1KiB, ...)")
	f.IntVar(&o.window, "window", 512, "publishes in flight")
	f.IntVar(&o.runs, "runs", 3, "runs; figures are medians")
	f.IntVar(&o.partitions, "partitions", 24, "partitions of the bench topic")
	f.IntVar(&o.replicas, "replicas", 3, "replicas of the bench topic")
	f.IntVar(&o.keys, "keys", 1024, "distinct keys")
	f.StringVar(&o.topic, "topic", "bench-publish", "bench topic (created, and deleted afterwards unless --keep)")
	f.BoolVar(&o.keep, "keep", false, "keep the bench topic")
	f.BoolVar(&o.inProcess, "in-process", false, "start temporary fabrics (sync_always on and off) instead of using --server")
	return cmd
}

// benchAgainst creates the bench topic with apply, runs the benchmark on
// nc and deletes the topic's stream unless --keep.
func benchAgainst(ctx context.Context, nc *nats.Conn, o benchPublishOptions, popts bench.PublishOptions, apply func(context.Context, platform.TopicSpec) error) (bench.Result, error) {
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(max(o.window*2, 256)))
	if err != nil {
		return bench.Result{}, err
	}
	spec := platform.DefaultTopicSpec(o.topic)
	spec.Partitions, spec.Replicas = o.partitions, o.replicas
	spec.Retention = platform.Retention{MaxAge: time.Hour}
	spec.Owner = "platformctl-bench"
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := apply(actx, spec); err != nil {
		return bench.Result{}, fmt.Errorf("create bench topic %s: %w", o.topic, err)
	}
	if !o.keep {
		defer func() {
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = js.DeleteStream(dctx, platform.StreamName(o.topic))
		}()
	} else if err := purge(ctx, js, o.topic); err != nil {
		return bench.Result{}, err
	}
	res, _, err := bench.Publish(ctx, js, popts)
	return res, err
}

func purge(ctx context.Context, js jetstream.JetStream, topic string) error {
	s, err := js.Stream(ctx, platform.StreamName(topic))
	if err != nil {
		return err
	}
	return s.Purge(ctx)
}

// benchInProcess measures publish on two temporary 3-node fabrics, with
// sync_always on and off, in one run.
func benchInProcess(ctx context.Context, out io.Writer, o benchPublishOptions, popts bench.PublishOptions) error {
	results := map[bool]bench.Result{}
	for _, sync := range []bool{true, false} {
		dir, err := os.MkdirTemp("", "platformctl-bench-")
		if err != nil {
			return err
		}
		res, err := benchFabric(ctx, dir, sync, o, popts)
		os.RemoveAll(dir)
		if err != nil {
			return err
		}
		results[sync] = res
		name := "bench.publish.sync_always"
		if !sync {
			name = "bench.publish.sync_interval"
		}
		printLines(out, res.Lines(name))
	}
	if a := results[false].MsgsPerS; a > 0 {
		fmt.Fprintf(out, "bench.publish.sync_always_vs_interval_ratio: %.2f x\n", results[true].MsgsPerS/a)
	}
	return nil
}

func benchFabric(ctx context.Context, dir string, sync bool, o benchPublishOptions, popts bench.PublishOptions) (bench.Result, error) {
	trust, err := embeddednats.NewTrust()
	if err != nil {
		return bench.Result{}, err
	}
	cfg := embeddednats.DefaultFabricConfig()
	cfg.Port, cfg.ClusterPort, cfg.DataDir = -1, -1, dir
	cfg.Durability.SyncAlways = sync
	cfg.LameDuck = 200 * time.Millisecond
	f, err := embeddednats.NewFabric(cfg, trust)
	if err != nil {
		return bench.Result{}, err
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := f.Start(sctx); err != nil {
		return bench.Result{}, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = f.Close(cctx)
	}()
	nc, err := f.Connect()
	if err != nil {
		return bench.Result{}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return bench.Result{}, err
	}
	rec := platform.NewReconciler(js, platform.ReconcilerOptions{DefaultReplicas: 3})
	return benchAgainst(ctx, nc, o, popts, func(ctx context.Context, spec platform.TopicSpec) error {
		_, err := rec.ApplyTopic(ctx, spec, platform.ApplyOptions{AllowReducedReplicas: true})
		return err
	})
}

func printLines(w io.Writer, lines []string) {
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}
