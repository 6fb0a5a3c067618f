package publish

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/bench"
	"github.com/msgplatform/platform/internal/tlsconf"
	"github.com/msgplatform/platform/internal/tlsconf/tlstest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
)

// benchTLSMinRuns is the fewest runs of each side the TLS comparison
// takes its medians of.
const benchTLSMinRuns = 3

// benchTLSCompare measures raw JetStream publish on two temporary 3-node
// fabrics up at once, alike but for the client port: plaintext on one,
// TLS (a throw-away CA, verified by the client) on the other. Runs
// alternate between them (plain first on even runs, TLS first on odd
// ones) so that a change of the machine's load meets both; each side's
// figures are the medians of max(--runs, 3) runs, and tls_over_plain is
// the ratio of their msg/s.
func benchTLSCompare(ctx context.Context, out io.Writer, o Options, popts bench.PublishOptions) error {
	root, err := os.MkdirTemp("", "platformctl-bench-tls-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	ca, err := tlstest.New(filepath.Join(root, "ca"))
	if err != nil {
		return err
	}
	srv, err := ca.Server("bench")
	if err != nil {
		return err
	}
	// The durability of the comparison: the platform's default.
	sync := true
	runs := max(o.Runs, benchTLSMinRuns)
	one := popts
	one.Runs = 1
	results := map[bool][]bench.Result{}
	err = bench.WithFabric(ctx, filepath.Join(root, "plain"), sync, tlsconf.Config{}, func(plainNC *nats.Conn, plainRec *catalog.Reconciler) error {
		return bench.WithFabric(ctx, filepath.Join(root, "tls"), sync, srv, func(tlsNC *nats.Conn, tlsRec *catalog.Reconciler) error {
			js := map[bool]jetstream.JetStream{}
			for tls, side := range map[bool]struct {
				nc  *nats.Conn
				rec *catalog.Reconciler
			}{false: {plainNC, plainRec}, true: {tlsNC, tlsRec}} {
				if tls != side.nc.TLSRequired() {
					return fmt.Errorf("bench: the %s fabric's connection has TLS %t", map[bool]string{false: "plain", true: "tls"}[tls], side.nc.TLSRequired())
				}
				j, err := benchPublishTopic(ctx, side.nc, side.rec, o)
				if err != nil {
					return err
				}
				js[tls] = j
			}
			_, err := bench.Interleave(runs, []bool{false, true}, strconv.FormatBool, func(run int, tls bool) (float64, error) {
				res, _, err := bench.Publish(ctx, js[tls], one)
				if err != nil {
					return 0, err
				}
				results[tls] = append(results[tls], res)
				if popts.Progress != nil {
					fmt.Fprintf(popts.Progress, "bench: tls comparison run %d/%d tls=%t: %.0f msg/s\n", run, runs, tls, res.MsgsPerS)
				}
				return res.MsgsPerS, nil
			}, nil)
			return err
		})
	})
	if err != nil {
		return err
	}
	plain, tls := bench.Median(results[false]), bench.Median(results[true])
	bench.PrintLines(out, plain.Lines("bench.publish.plain"))
	bench.PrintLines(out, tls.Lines("bench.publish.tls"))
	if plain.MsgsPerS > 0 {
		fmt.Fprintf(out, "bench.publish.tls_over_plain: %.2f x\n", tls.MsgsPerS/plain.MsgsPerS)
	}
	return nil
}

// benchPublishTopic creates the bench topic with rec and returns a JetStream
// context on nc with room for --window publishes in flight.
func benchPublishTopic(ctx context.Context, nc *nats.Conn, rec *catalog.Reconciler, o Options) (jetstream.JetStream, error) {
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(max(o.Window*2, 256)))
	if err != nil {
		return nil, err
	}
	if _, err := createTopic(ctx, o, func(ctx context.Context, spec platform.TopicSpec) error {
		_, err := rec.ApplyTopic(ctx, spec, catalog.ApplyOptions{AllowReducedReplicas: true})
		return err
	}); err != nil {
		return nil, err
	}
	return js, nil
}
