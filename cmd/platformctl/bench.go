package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/internal/bench"
	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/tlsconf"
	"github.com/msgplatform/platform/internal/units"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/schema"
)

func newBenchCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Benchmarks; each reports figures as 'name: value unit', one per line",
	}
	cmd.AddCommand(newBenchPublishCmd(g), newBenchOutboxCmd(g), newBenchInboxCmd(g))
	cmd.AddCommand(newBenchGroupCmd(g))
	cmd.AddCommand(newBenchQuotaCmd(g))
	cmd.AddCommand(newBenchMirrorCmd(g))
	cmd.AddCommand(newBenchRedriveCmd(g))
	cmd.AddCommand(newBenchQueueCmd(g))
	cmd.AddCommand(newBenchGateCmd(g))
	return cmd
}

type benchPublishOptions struct {
	count, window, runs, partitions, replicas, keys int
	size                                            string
	topic                                           string
	keep, inProcess, validate                       bool
	// compare is --compare: the in-process comparisons to run.
	compare []string
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
starts temporary 3-node fabrics itself and runs the comparisons --compare
names:

  sync  one fabric with sync_always on and one with it off, one after the
        other: both figures and their ratio;
  tls   one fabric with a plaintext client port and one with TLS on it
        (a throw-away CA; the client verifies the server), both up at once,
        runs interleaved (plain, tls, tls, plain, ...), medians of
        max(--runs, 3) each: both figures and tls_over_plain (goal >= 0.85).`,
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
			if o.validate {
				return benchValidateCmd(cmd.Context(), out, g, o, popts)
			}
			if o.inProcess {
				if err := checkCompare(o.compare); err != nil {
					return usageError{err}
				}
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
			bench.PrintLines(out, res.Lines("bench.publish"))
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
	f.BoolVar(&o.inProcess, "in-process", false, "start temporary fabrics (see --compare) instead of using --server")
	f.StringSliceVar(&o.compare, "compare", []string{"sync", "tls"}, "with --in-process: the comparisons to run, sync (sync_always on vs off) and tls (TLS on the client port vs plaintext)")
	f.BoolVar(&o.validate, "validate", false, "publish JSON events through platform.Publisher with and without schema validation, same run, and print the ratio (with --in-process: one temporary fabric)")
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
	} else if err := bench.Purge(ctx, js, o.topic); err != nil {
		return bench.Result{}, err
	}
	res, _, err := bench.Publish(ctx, js, popts)
	return res, err
}

// checkCompare checks --compare.
func checkCompare(compare []string) error {
	if len(compare) == 0 {
		return fmt.Errorf("--compare: name at least one of sync, tls")
	}
	for _, c := range compare {
		if c != "sync" && c != "tls" {
			return fmt.Errorf("--compare: want sync or tls, got %q", c)
		}
	}
	return nil
}

// benchInProcess runs the --compare comparisons on temporary fabrics.
func benchInProcess(ctx context.Context, out io.Writer, o benchPublishOptions, popts bench.PublishOptions) error {
	for _, c := range o.compare {
		var err error
		switch c {
		case "sync":
			err = benchSyncCompare(ctx, out, o, popts)
		case "tls":
			err = benchTLSCompare(ctx, out, o, popts)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// benchSyncCompare measures publish on two temporary 3-node fabrics, with
// sync_always on and off, one after the other.
func benchSyncCompare(ctx context.Context, out io.Writer, o benchPublishOptions, popts bench.PublishOptions) error {
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
		bench.PrintLines(out, res.Lines(name))
	}
	if a := results[false].MsgsPerS; a > 0 {
		fmt.Fprintf(out, "bench.publish.sync_always_vs_interval_ratio: %.2f x\n", results[true].MsgsPerS/a)
	}
	return nil
}

func benchFabric(ctx context.Context, dir string, sync bool, o benchPublishOptions, popts bench.PublishOptions) (res bench.Result, err error) {
	err = bench.WithFabric(ctx, dir, sync, tlsconf.Config{}, func(nc *nats.Conn, rec *platform.Reconciler) error {
		res, err = benchAgainst(ctx, nc, o, popts, func(ctx context.Context, spec platform.TopicSpec) error {
			_, err := rec.ApplyTopic(ctx, spec, platform.ApplyOptions{AllowReducedReplicas: true})
			return err
		})
		return err
	})
	return res, err
}

// benchValidateCmd runs the --validate benchmark against --server, or on
// one temporary 3-node fabric with --in-process.
func benchValidateCmd(ctx context.Context, out io.Writer, g *globalOptions, o benchPublishOptions, popts bench.PublishOptions) error {
	if !o.inProcess {
		nc, err := g.connect()
		if err != nil {
			return err
		}
		defer nc.Close()
		return benchValidate(ctx, out, nc, o, popts, func(ctx context.Context, spec platform.TopicSpec) error {
			return control.Call(ctx, nc, control.SubjTopicApply, control.ApplyTopicRequest{
				Spec: spec, Options: platform.ApplyOptions{AllowReducedReplicas: true},
			}, nil)
		})
	}
	dir, err := os.MkdirTemp("", "platformctl-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	return bench.WithFabric(ctx, dir, true, tlsconf.Config{}, func(nc *nats.Conn, rec *platform.Reconciler) error {
		return benchValidate(ctx, out, nc, o, popts, func(ctx context.Context, spec platform.TopicSpec) error {
			_, err := rec.ApplyTopic(ctx, spec, platform.ApplyOptions{AllowReducedReplicas: true})
			return err
		})
	})
}

// benchValidateSchema is the bench event type's schema (an OrderPlaced
// with a padding field to reach --size).
const benchValidateSchema = `{"type":"object","additionalProperties":false,
 "required":["orderId","customerId","total","currency","items"],
 "properties":{"orderId":{"type":"string"},"customerId":{"type":"string"},"total":{"type":"number","minimum":0},
  "currency":{"enum":["EUR","USD"]},"pad":{"type":"string"},
  "items":{"type":"array","items":{"type":"object","required":["sku","qty"],
   "properties":{"sku":{"type":"string"},"qty":{"type":"integer","minimum":1},"price":{"type":"number"}}}}}}`

// benchValidate publishes --count JSON events through platform.Publisher
// (up to --window in flight) without and with a schema validator, in
// alternating order, --runs times, on the same topic, and prints both
// medians and their ratio.
func benchValidate(ctx context.Context, out io.Writer, nc *nats.Conn, o benchPublishOptions, popts bench.PublishOptions, apply func(context.Context, platform.TopicSpec) error) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	spec := platform.DefaultTopicSpec(o.topic)
	spec.Partitions, spec.Replicas = o.partitions, o.replicas
	spec.Retention = platform.Retention{MaxAge: time.Hour}
	spec.Owner = "platformctl-bench"
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := apply(actx, spec); err != nil {
		return fmt.Errorf("create bench topic %s: %w", o.topic, err)
	}
	if !o.keep {
		defer func() {
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = js.DeleteStream(dctx, platform.StreamName(o.topic))
		}()
	}
	reg, err := schema.New(js, schema.Config{Replicas: o.replicas})
	if err != nil {
		return err
	}
	const eventType = "BenchOrderPlaced"
	if _, err := reg.Register(actx, eventType, []byte(benchValidateSchema), schema.RegisterOptions{Mode: schema.ModeNone}); err != nil {
		return fmt.Errorf("register bench schema: %w", err)
	}
	// The topic opts in (validate: true, event_type), as a service's
	// catalog declares it.
	spec.ValidateEvents, spec.EventType = true, eventType
	val := reg.NewTopicValidator(spec)
	if err := val.Start(actx); err != nil {
		return err
	}
	defer val.Close()
	payload := bench.OrderPayload(popts.Size)
	// The validation cost alone, one goroutine.
	const probe = 2000
	start := time.Now()
	for i := 0; i < probe; i++ {
		if _, err := val.Validate(o.topic, &platform.Event{Payload: payload}); err != nil {
			return fmt.Errorf("bench payload does not validate: %w", err)
		}
	}
	cost := time.Since(start) / probe
	pubs := map[bool]*platform.Publisher{
		false: platform.NewPublisher(js, platform.PublisherOptions{}),
		true:  platform.NewPublisher(js, platform.PublisherOptions{Validator: val}),
	}
	rates := map[bool][]float64{}
	for r := 0; r < o.runs; r++ {
		order := []bool{false, true}
		if r%2 == 1 {
			order = []bool{true, false}
		}
		for _, validated := range order {
			rate, err := publishThrough(ctx, pubs[validated], o, payload, fmt.Sprintf("r%d-%t", r, validated))
			if err != nil {
				return err
			}
			rates[validated] = append(rates[validated], rate)
			if popts.Progress != nil {
				fmt.Fprintf(popts.Progress, "run %d validated=%t: %.0f msgs/s\n", r+1, validated, rate)
			}
		}
	}
	plain, validated := bench.MedianUpper(rates[false]), bench.MedianUpper(rates[true])
	fmt.Fprintf(out, "bench.publish.plain.msgs_per_s: %.0f msgs/s\n", plain)
	fmt.Fprintf(out, "bench.publish.validated.msgs_per_s: %.0f msgs/s\n", validated)
	fmt.Fprintf(out, "bench.publish.validate_cost: %.1f us/event\n", float64(cost.Nanoseconds())/1000)
	fmt.Fprintf(out, "bench.publish.payload: %d bytes\n", len(payload))
	if plain > 0 {
		fmt.Fprintf(out, "bench.publish.validated_vs_plain_ratio: %.2f x (goal >= 0.90)\n", validated/plain)
	}
	return nil
}

// publishThrough publishes o.count events through pub with o.window
// publishers in flight and returns the rate.
func publishThrough(ctx context.Context, pub *platform.Publisher, o benchPublishOptions, payload []byte, tag string) (float64, error) {
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < o.window; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= o.count || ctx.Err() != nil {
					return
				}
				_, err := pub.Publish(ctx, platform.Event{ID: tag + "-" + strconv.Itoa(i), Topic: o.topic, Key: "key-" + strconv.Itoa(i%o.keys), Payload: payload})
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, err
	}
	return float64(o.count) / time.Since(start).Seconds(), nil
}

// profiled runs run under a CPU profile to path (none when empty); a
// profile that cannot be started is a usage error.
func profiled(path string, run func() error) error {
	stop, err := bench.StartCPUProfile("--cpuprofile", path)
	if err != nil {
		return usageError{err}
	}
	defer stop()
	return run()
}

// benchRemote is the platform at --server as a bench reaches it.
func (g *globalOptions) benchRemote() bench.Remote {
	return bench.Remote{
		Connect: g.connect,
		URLs:    strings.Split(g.server, ","),
		ConnOptions: func() ([]nats.Option, error) {
			tc, err := g.tlsClient()
			if err != nil || tc == nil {
				return nil, err
			}
			return []nats.Option{nats.Secure(tc)}, nil
		},
		Actor: actor(),
	}
}

// storeFlags binds the flags bench outbox and bench inbox share to o;
// count is --count's default.
func storeFlags(cmd *cobra.Command, o *bench.StoreOptions, count int) {
	f := cmd.Flags()
	f.StringVar(&o.DSN, "dsn", "", "PostgreSQL DSN; the bench creates and drops its own database there (needs CREATEDB)")
	f.IntVar(&o.Count, "count", count, "events per run")
	f.IntVar(&o.Keys, "keys", 1024, "distinct keys")
	f.IntVar(&o.Size, "size", 1024, "payload bytes")
	f.IntVar(&o.Runs, "runs", 3, "runs, interleaved (raw and each backend in every run, in alternating order); figures are medians")
	f.BoolVar(&o.InProcess, "in-process", false, "start a temporary 3-node fabric instead of using --server")
	f.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of the whole bench to this file")
}
