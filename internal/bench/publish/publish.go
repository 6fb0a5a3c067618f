package publish

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/bench"
	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/tlsconf"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/platform/schema"
)

// Options configure bench publish beyond its bench.PublishOptions.
type Options struct {
	// Count, Window, Runs and Keys are those of the PublishOptions.
	Count, Window, Runs, Keys int
	// Size is the payload size as the command's flag gives it (1KiB).
	Size string
	// Topic is created with Partitions and Replicas, and deleted
	// afterwards unless Keep.
	Topic                string
	Partitions, Replicas int
	Keep                 bool
	// InProcess runs the Compare comparisons (sync, tls) on temporary
	// fabrics instead of measuring the remote platform.
	InProcess bool
	Compare   []string
	// Validate publishes through platform.Publisher with and without
	// schema validation instead.
	Validate bool
}

// Run measures raw JetStream publish with popts as o says (against
// remote, or the in-process comparisons, or schema validation) and
// writes one 'name: value unit' line per figure to out.
func Run(ctx context.Context, out io.Writer, remote bench.Remote, o Options, popts bench.PublishOptions) error {
	if o.Validate {
		return benchValidateCmd(ctx, out, remote, o, popts)
	}
	if o.InProcess {
		return benchInProcess(ctx, out, o, popts)
	}
	nc, err := remote.Connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	res, err := benchAgainst(ctx, nc, o, popts, func(ctx context.Context, spec platform.TopicSpec) error {
		return control.Call(ctx, nc, control.SubjTopicApply, control.ApplyTopicRequest{
			Spec: spec, Options: catalog.ApplyOptions{AllowReducedReplicas: true},
		}, nil)
	})
	if err != nil {
		return err
	}
	bench.PrintLines(out, res.Lines("bench.publish"))
	return nil
}

// createTopic creates the bench topic of o with apply, within 30s, and
// returns its spec.
func createTopic(ctx context.Context, o Options, apply func(context.Context, platform.TopicSpec) error) (platform.TopicSpec, error) {
	spec := bench.TopicSpec(o.Topic, o.Partitions, o.Replicas)
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := apply(actx, spec); err != nil {
		return spec, fmt.Errorf("create bench topic %s: %w", o.Topic, err)
	}
	return spec, nil
}

// benchAgainst creates the bench topic with apply, runs the benchmark on
// nc and deletes the topic's stream unless --keep.
func benchAgainst(ctx context.Context, nc *nats.Conn, o Options, popts bench.PublishOptions, apply func(context.Context, platform.TopicSpec) error) (bench.Result, error) {
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(max(o.Window*2, 256)))
	if err != nil {
		return bench.Result{}, err
	}
	if _, err := createTopic(ctx, o, apply); err != nil {
		return bench.Result{}, err
	}
	if !o.Keep {
		defer func() {
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = js.DeleteStream(dctx, platform.StreamName(o.Topic))
		}()
	} else if err := bench.Purge(ctx, js, o.Topic); err != nil {
		return bench.Result{}, err
	}
	res, _, err := bench.Publish(ctx, js, popts)
	return res, err
}

// benchInProcess runs the --compare comparisons on temporary fabrics.
func benchInProcess(ctx context.Context, out io.Writer, o Options, popts bench.PublishOptions) error {
	for _, c := range o.Compare {
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
func benchSyncCompare(ctx context.Context, out io.Writer, o Options, popts bench.PublishOptions) error {
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

func benchFabric(ctx context.Context, dir string, sync bool, o Options, popts bench.PublishOptions) (res bench.Result, err error) {
	err = bench.WithFabric(ctx, dir, sync, tlsconf.Config{}, func(nc *nats.Conn, rec *catalog.Reconciler) error {
		res, err = benchAgainst(ctx, nc, o, popts, func(ctx context.Context, spec platform.TopicSpec) error {
			_, err := rec.ApplyTopic(ctx, spec, catalog.ApplyOptions{AllowReducedReplicas: true})
			return err
		})
		return err
	})
	return res, err
}

// benchValidateCmd runs the --validate benchmark against --server, or on
// one temporary 3-node fabric with --in-process.
func benchValidateCmd(ctx context.Context, out io.Writer, remote bench.Remote, o Options, popts bench.PublishOptions) error {
	if !o.InProcess {
		nc, err := remote.Connect()
		if err != nil {
			return err
		}
		defer nc.Close()
		return benchValidate(ctx, out, nc, o, popts, func(ctx context.Context, spec platform.TopicSpec) error {
			return control.Call(ctx, nc, control.SubjTopicApply, control.ApplyTopicRequest{
				Spec: spec, Options: catalog.ApplyOptions{AllowReducedReplicas: true},
			}, nil)
		})
	}
	dir, err := os.MkdirTemp("", "platformctl-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	return bench.WithFabric(ctx, dir, true, tlsconf.Config{}, func(nc *nats.Conn, rec *catalog.Reconciler) error {
		return benchValidate(ctx, out, nc, o, popts, func(ctx context.Context, spec platform.TopicSpec) error {
			_, err := rec.ApplyTopic(ctx, spec, catalog.ApplyOptions{AllowReducedReplicas: true})
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
func benchValidate(ctx context.Context, out io.Writer, nc *nats.Conn, o Options, popts bench.PublishOptions, apply func(context.Context, platform.TopicSpec) error) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	spec, err := createTopic(actx, o, apply)
	if err != nil {
		return err
	}
	if !o.Keep {
		defer func() {
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = js.DeleteStream(dctx, platform.StreamName(o.Topic))
		}()
	}
	reg, err := schema.New(js, schema.Config{Replicas: o.Replicas})
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
		if _, err := val.Validate(o.Topic, &platform.Event{Payload: payload}); err != nil {
			return fmt.Errorf("bench payload does not validate: %w", err)
		}
	}
	cost := time.Since(start) / probe
	pubs := map[bool]*platform.Publisher{
		false: platform.NewPublisher(js, platform.PublisherOptions{}),
		true:  platform.NewPublisher(js, platform.PublisherOptions{Validator: val}),
	}
	res, err := bench.Interleave(o.Runs, []bool{false, true}, strconv.FormatBool, func(run int, validated bool) (float64, error) {
		rate, err := publishThrough(ctx, pubs[validated], o, payload, fmt.Sprintf("r%d-%t", run-1, validated))
		if err != nil {
			return 0, err
		}
		if popts.Progress != nil {
			fmt.Fprintf(popts.Progress, "run %d validated=%t: %.0f msgs/s\n", run, validated, rate)
		}
		return rate, nil
	}, nil)
	if err != nil {
		return err
	}
	plain, validated := bench.MedianUpper(res.Rates["false"]), bench.MedianUpper(res.Rates["true"])
	fmt.Fprintf(out, "bench.publish.plain.msgs_per_s: %.0f msgs/s\n", plain)
	fmt.Fprintf(out, "bench.publish.validated.msgs_per_s: %.0f msgs/s\n", validated)
	fmt.Fprintf(out, "bench.publish.validate_cost: %.1f us/event\n", float64(cost.Nanoseconds())/1000)
	fmt.Fprintf(out, "bench.publish.payload: %d bytes\n", len(payload))
	if plain > 0 {
		fmt.Fprintf(out, "bench.publish.validated_vs_plain_ratio: %.2f x (goal >= 0.90)\n", validated/plain)
	}
	return nil
}

// publishThrough publishes o.Count events through pub with o.Window
// publishers in flight and returns the rate.
func publishThrough(ctx context.Context, pub *platform.Publisher, o Options, payload []byte, tag string) (float64, error) {
	var next atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < o.Window; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= o.Count || ctx.Err() != nil {
					return
				}
				_, err := pub.Publish(ctx, platform.Event{ID: tag + "-" + strconv.Itoa(i), Topic: o.Topic, Key: "key-" + strconv.Itoa(i%o.Keys), Payload: payload})
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
	return float64(o.Count) / time.Since(start).Seconds(), nil
}
