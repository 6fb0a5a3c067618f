package tenant

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/bench"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/tenancy"
)

// GateOptions configure one run of the gate harness; Validate names
// the command's flags.
type GateOptions struct {
	// Count events of Size bytes per run and side, drained Batch per
	// pull.
	Count, Size, Batch, Runs int
	// CPUProfile is the file the command profiles the whole run to.
	CPUProfile string
}

// Validate reports every problem at once.
func (o GateOptions) Validate() error {
	var batch error
	if o.Batch < 1 || o.Batch > 1000 {
		batch = fmt.Errorf("--batch must be 1..1000 (the group's max ack pending), got %d", o.Batch)
	}
	return errors.Join(bench.CheckCountSize(o.Count, o.Size), batch, bench.CheckRuns(o.Runs))
}

// gateSide is one consumer of the bench: where its events are queued and
// how they are drained.
type gateSide struct {
	name    string
	pubJS   jetstream.JetStream // queues the events (the platform's view)
	subject string              // what pubJS publishes to
	cons    jetstream.Consumer  // the reader's handle (kept: it holds the pin)
	info    func(ctx context.Context) (*jetstream.ConsumerInfo, error)
	group   string
}

// Name is s's name in the figures.
func (s *gateSide) Name() string { return s.name }

// RunGate starts a temporary fabric with a tenancy manager and drains
// like-for-like consumers, one read straight from JetStream and one a
// tenant member reads through the gate, o.Runs times alternating, and
// writes each run's figures and the medians to out.
func RunGate(ctx context.Context, out, progress io.Writer, o GateOptions) error {
	t, err := newInProcessQuotaTarget(ctx, QuotaOptions{})
	if err != nil {
		return err
	}
	defer t.close()
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	topic := platform.DefaultTopicSpec("orders")
	topic.Partitions, topic.Replicas = 1, 3

	// The platform's account: the admin reads straight from JetStream.
	if err := t.applyRaw(sctx, topic); err != nil {
		return fmt.Errorf("bench gate: raw topic: %w", err)
	}
	ajs, err := jetstream.New(t.nc, jetstream.WithPublishAsyncMaxPending(1024))
	if err != nil {
		return err
	}
	if _, err := catalog.NewReconciler(ajs, catalog.ReconcilerOptions{DefaultReplicas: 3}).ApplyGroup(sctx, platform.GroupSpec{Name: "bench", Topic: "orders"}, catalog.ApplyOptions{}); err != nil {
		return fmt.Errorf("bench gate: raw group: %w", err)
	}
	rjs, err := jetstream.New(t.raw)
	if err != nil {
		return err
	}
	// A tenant's account: its member reads through the gate.
	const tenant = "bench-gate"
	if _, err := t.tenant(sctx, tenant, tenancy.DefaultQuota(), topic); err != nil {
		return fmt.Errorf("bench gate: tenant: %w", err)
	}
	if _, err := t.m.ApplyGroup(sctx, "platformctl-bench", tenant, platform.GroupSpec{Name: "bench", Topic: "orders"}, catalog.ApplyOptions{}); err != nil {
		return fmt.Errorf("bench gate: tenant group: %w", err)
	}
	uc, err := t.m.AddUser(sctx, "platformctl-bench", tenant, tenancy.UserSpec{Name: "member", Sub: []string{"bench"}})
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "platformctl-bench-gate-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	credsFile := filepath.Join(dir, "member.creds")
	if err := os.WriteFile(credsFile, uc.Creds, 0o600); err != nil {
		return err
	}
	mnc, err := nats.Connect(t.f.Nodes()[0].ClientURL(), nats.UserCredentials(credsFile),
		nats.CustomInboxPrefix(tenancy.InboxPrefix("member")), nats.Name("platformctl-bench-member"))
	if err != nil {
		return fmt.Errorf("bench gate: connect as the tenant member: %w", err)
	}
	defer mnc.Close()
	mjs, err := jetstream.New(mnc)
	if err != nil {
		return err
	}
	tjs, err := t.m.TenantJetStream(tenant)
	if err != nil {
		return err
	}
	pc := platform.PartitionConsumer("bench", 0)
	sides := []*gateSide{
		{name: "raw", pubJS: ajs, subject: "orders.k", group: "bench"},
		{name: "gated", pubJS: tjs, subject: tenancy.StoredName("orders") + ".k"},
	}
	if sides[0].cons, err = rjs.Consumer(sctx, platform.StreamName("orders"), pc); err != nil {
		return err
	}
	if sides[1].cons, err = mjs.Consumer(sctx, tenancy.StreamName("orders"), pc); err != nil {
		return fmt.Errorf("bench gate: the member's consumer: %w", err)
	}
	for _, s := range sides {
		s.info = s.cons.Info
		if pg := s.cons.CachedInfo().Config.PriorityGroups; len(pg) > 0 {
			s.group = pg[0]
		}
	}
	fmt.Fprintf(out, "bench.gate.params: count=%d size=%dB batch=%d replicas=3 runs=%d\n", o.Count, o.Size, o.Batch, o.Runs)
	fmt.Fprintf(out, "bench.gate.placement: %s\n", t.arrange(ctx, platform.StreamName("orders"), []string{tenant}, tenant))
	payload := make([]byte, o.Size)
	firsts, empties := map[string][]float64{}, map[string]int{}
	first := map[string]float64{} // the run's first-batch rates
	var firstRatios []float64
	res, err := bench.Interleave(o.Runs, sides, (*gateSide).Name, func(run int, s *gateSide) (float64, error) {
		fmt.Fprintf(progress, "bench gate: run %d/%d: queueing %d events for %s\n", run, o.Runs, o.Count, s.name)
		for range o.Count {
			if _, err := s.pubJS.PublishAsync(s.subject, payload); err != nil {
				return 0, fmt.Errorf("bench gate: queue: %w", err)
			}
		}
		select {
		case <-s.pubJS.PublishAsyncComplete():
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		total, head, empty, err := drainGate(ctx, progress, s, o)
		if err != nil {
			return 0, fmt.Errorf("bench gate: %s: %w", s.name, err)
		}
		empties[s.name] += empty
		rate := float64(o.Count) / total.Seconds()
		first[s.name] = float64(min(o.Batch, o.Count)) / head.Seconds()
		firsts[s.name] = append(firsts[s.name], first[s.name])
		fmt.Fprintf(out, "bench.gate.run%d.%s.events_per_sec: %.0f events/s\n", run, s.name, rate)
		fmt.Fprintf(out, "bench.gate.run%d.%s.first_batch_ms: %.2f ms\n", run, s.name, head.Seconds()*1000)
		return rate, nil
	}, func(run int, ratios map[string]float64) {
		firstRatios = append(firstRatios, first["gated"]/first["raw"])
		fmt.Fprintf(out, "bench.gate.run%d.gated_over_raw: %.2f x\n", run, ratios["gated"])
	})
	if err != nil {
		return err
	}
	for _, s := range sides {
		fmt.Fprintf(out, "bench.gate.median.%s.events_per_sec: %.0f events/s\n", s.name, bench.MedianOf(res.Rates[s.name]))
		fmt.Fprintf(out, "bench.gate.median.%s.first_batch_events_per_sec: %.0f events/s\n", s.name, bench.MedianOf(firsts[s.name]))
		fmt.Fprintf(out, "bench.gate.%s.empty_fetches: %d pulls\n", s.name, empties[s.name])
	}
	fmt.Fprintf(out, "bench.gate.median.gated_over_raw: %.2f x\n", bench.MedianOf(res.Ratios["gated"]))
	fmt.Fprintf(out, "bench.gate.median.first_batch_gated_over_raw: %.2f x\n", bench.MedianOf(firstRatios))
	return nil
}

// drainGate reads count events from s with Fetch and one ack each, and
// returns when the consumer's ack floor holds them all: the whole time,
// the time of the first batch (fetched and acked), and how many pulls
// brought nothing while events were pending (each one waited out its
// expiry; five in a row fail the run).
func drainGate(ctx context.Context, progress io.Writer, s *gateSide, o GateOptions) (total, head time.Duration, empty int, err error) {
	info, err := s.info(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	want := info.AckFloor.Stream + uint64(o.Count)
	start := time.Now()
	read, inARow := 0, 0
	for read < o.Count {
		if ctx.Err() != nil {
			return 0, 0, 0, ctx.Err()
		}
		b, err := s.cons.Fetch(min(o.Batch, o.Count-read), jetstream.FetchMaxWait(5*time.Second), jetstream.FetchPriorityGroup(s.group))
		if err != nil {
			return 0, 0, 0, err
		}
		n := 0
		for m := range b.Messages() {
			if err := m.Ack(); err != nil {
				return 0, 0, 0, err
			}
			n++
		}
		if n == 0 {
			empty++
			inARow++
			if ci, err := s.info(ctx); err == nil {
				fmt.Fprintf(progress, "bench gate: %s: a pull brought nothing after %d of %d (%v; consumer: %d ack pending, %d waiting, %d pending)\n",
					s.name, read, o.Count, b.Error(), ci.NumAckPending, ci.NumWaiting, ci.NumPending)
			}
			if inARow == 5 {
				return 0, 0, empty, fmt.Errorf("%d pulls in a row brought nothing after %d of %d: %v", inARow, read, o.Count, b.Error())
			}
			continue
		}
		inARow = 0
		if read == 0 {
			head = time.Since(start)
		}
		read += n
	}
	for {
		info, err := s.info(ctx)
		if err != nil {
			return 0, 0, empty, err
		}
		if info.AckFloor.Stream >= want {
			return time.Since(start), head, empty, nil
		}
		if time.Since(start) > 2*time.Minute {
			return 0, 0, empty, fmt.Errorf("ack floor %d, want %d", info.AckFloor.Stream, want)
		}
		time.Sleep(time.Millisecond)
	}
}
