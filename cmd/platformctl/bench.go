package main

import (
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/internal/bench"
	"github.com/msgplatform/platform/internal/bench/publish"
	"github.com/msgplatform/platform/internal/cli"
	"github.com/msgplatform/platform/internal/units"
	"github.com/msgplatform/platform/platform"
)

func newBenchCmd(g *globalOptions) *cobra.Command {
	return parentCmd("bench", "Benchmarks; each reports figures as 'name: value unit', one per line",
		newBenchPublishCmd(g), newBenchOutboxCmd(g), newBenchInboxCmd(g), newBenchGroupCmd(g), newBenchQuotaCmd(g),
		newBenchMirrorCmd(g), newBenchRedriveCmd(g), newBenchQueueCmd(g), newBenchGateCmd(g))
}

func newBenchPublishCmd(g *globalOptions) *cobra.Command {
	o := publish.Options{}
	cmd := benchCmd("publish", "Raw JetStream publish of 1 KiB events to an R3 topic: msgs/s, MiB/s, ack p50/p99",
		`Publishes --count events of --size bytes to a bench topic (R3, --partitions
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
        max(--runs, 3) each: both figures and tls_over_plain (goal >= 0.85).`, func(cmd *cobra.Command) error {
			size, err := sizeFlag("--size", o.Size)
			if err != nil {
				return err
			}
			popts := bench.PublishOptions{
				Count: o.Count, Size: int(size), Window: o.Window, Runs: o.Runs,
				Progress: cmd.ErrOrStderr(),
				Subject:  func(i int) string { return platform.TopicSubject(o.Topic, fmt.Sprintf("key-%d", i%o.Keys)) },
			}
			if err := popts.Validate(); err != nil {
				return cli.UsageError{Err: err}
			}
			if o.InProcess && !o.Validate {
				if err := checkCompare(o.Compare); err != nil {
					return cli.UsageError{Err: err}
				}
			}
			return publish.Run(cmd.Context(), cmd.OutOrStdout(), g.benchRemote(), o, popts)
		})
	f := cmd.Flags()
	f.IntVar(&o.Count, "count", 50000, "events per run")
	f.StringVar(&o.Size, "size", "1KiB", "payload size (1024, 1KiB, ...)")
	f.IntVar(&o.Window, "window", 512, "publishes in flight")
	f.IntVar(&o.Runs, "runs", 3, "runs; figures are medians")
	f.IntVar(&o.Partitions, "partitions", 24, "partitions of the bench topic")
	f.IntVar(&o.Replicas, "replicas", 3, "replicas of the bench topic")
	f.IntVar(&o.Keys, "keys", 1024, "distinct keys")
	f.StringVar(&o.Topic, "topic", "bench-publish", "bench topic (created, and deleted afterwards unless --keep)")
	f.BoolVar(&o.Keep, "keep", false, "keep the bench topic")
	f.BoolVar(&o.InProcess, "in-process", false, "start temporary fabrics (see --compare) instead of using --server")
	f.StringSliceVar(&o.Compare, "compare", []string{"sync", "tls"}, "with --in-process: the comparisons to run, sync (sync_always on vs off) and tls (TLS on the client port vs plaintext)")
	f.BoolVar(&o.Validate, "validate", false, "publish JSON events through platform.Publisher with and without schema validation, same run, and print the ratio (with --in-process: one temporary fabric)")
	return cmd
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

// benchCmd is `bench USE`, a command without arguments: run gets the
// command for its context, its output (figures) and its error stream
// (progress).
func benchCmd(use, short, long string, run func(cmd *cobra.Command) error) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return run(cmd) },
	}
}

// sizeFlag parses the byte count s of flag (a usage error when it is not
// one).
func sizeFlag(flag, s string) (int64, error) {
	n, err := units.ParseSize(s)
	if err != nil {
		return 0, cli.UsageError{Err: fmt.Errorf("%s: %w", flag, err)}
	}
	return n, nil
}

// profiled returns invalid (the options' Validate error) as a usage
// error; else it runs run under a CPU profile to path (none when empty).
// A profile that cannot be started is a usage error.
func profiled(invalid error, path string, run func() error) error {
	if invalid != nil {
		return cli.UsageError{Err: invalid}
	}
	stop, err := bench.StartCPUProfile("--cpuprofile", path)
	if err != nil {
		return cli.UsageError{Err: err}
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
