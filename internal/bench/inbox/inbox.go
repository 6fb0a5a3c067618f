package inbox

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/bench"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/inbox/pebbleinbox"
	"github.com/msgplatform/platform/platform/inbox/pginbox"
)

// inboxMode is one way of consuming under bench.
type inboxMode struct {
	name    string
	process func(ctx context.Context, msgs []platform.InboxMsg) error
}

// Name is m's name in the figures.
func (m inboxMode) Name() string { return m.name }

// openInboxModes returns raw ack, the Pebble inbox and (unless skipped)
// the Postgres inbox, each with a one-row business effect.
func openInboxModes(ctx context.Context, o bench.StoreOptions) ([]inboxMode, func(), error) {
	db, pool, cleanup, err := bench.OpenStores(ctx, o, pginbox.Migrate)
	if err != nil {
		return nil, nil, err
	}
	modes := []inboxMode{{"raw", func(_ context.Context, msgs []platform.InboxMsg) error {
		for _, m := range msgs {
			if err := m.Ack(); err != nil {
				return err
			}
		}
		return nil
	}}}
	pin, err := pebbleinbox.New(db, platform.DefaultInboxConfig("bench"), pebbleinbox.Options{})
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	modes = append(modes, inboxMode{"pebble_inbox", func(ctx context.Context, msgs []platform.InboxMsg) error {
		_, _, err := pin.ProcessBatch(ctx, msgs, func(b *pebble.Batch, m platform.InboxMsg) error {
			id, _ := platform.EventIDOf(m)
			return b.Set([]byte("bench/effect/"+id), []byte("1"), nil)
		})
		return err
	}})
	if pool != nil {
		if _, err := pool.Exec(ctx, `CREATE TABLE bench_effects (event_id text PRIMARY KEY)`); err != nil {
			cleanup()
			return nil, nil, err
		}
		gin, err := pginbox.New(pool, platform.DefaultInboxConfig("bench"))
		if err != nil {
			cleanup()
			return nil, nil, err
		}
		modes = append(modes, inboxMode{"postgres_inbox", pgInboxProcess(gin)})
	}
	return modes, cleanup, nil
}

// pgInboxProcess runs ProcessBatch with a one-row effect per message.
func pgInboxProcess(gin *pginbox.Inbox) func(ctx context.Context, msgs []platform.InboxMsg) error {
	return func(ctx context.Context, msgs []platform.InboxMsg) error {
		_, _, err := gin.ProcessBatch(ctx, msgs, func(tx pgx.Tx, m platform.InboxMsg) error {
			id, _ := platform.EventIDOf(m)
			_, err := tx.Exec(ctx, `INSERT INTO bench_effects (event_id) VALUES ($1)`, id)
			return err
		})
		return err
	}
}

// Run publishes o.Count events and consumes them raw and through each
// inbox, o.Runs times interleaved, and writes each run's rates and
// ratios and their medians to out.
func Run(ctx context.Context, out io.Writer, remote bench.Remote, o bench.StoreOptions) error {
	const topic = "bench-inbox"
	_, js, cleanup, err := bench.Setup(ctx, remote, o.InProcess, topic, 1024)
	if err != nil {
		return err
	}
	defer cleanup()
	id := time.Now().UnixNano()
	if _, _, err := bench.Publish(ctx, js, bench.PublishOptions{
		Count: o.Count, Size: o.Size, Window: 512, Runs: 1,
		Subject: func(i int) string { return platform.TopicSubject(topic, fmt.Sprintf("key-%d", i%o.Keys)) },
		MsgID:   func(i int) string { return fmt.Sprintf("inbox-%d-%d", id, i) },
	}); err != nil {
		return fmt.Errorf("bench inbox: publish %d events: %w", o.Count, err)
	}
	modes, closeModes, err := openInboxModes(ctx, o)
	if err != nil {
		return err
	}
	defer closeModes()
	fmt.Fprintf(out, "bench.inbox.consume_params: count=%d size=%dB fetch=500 ack=explicit prefetch=1_batch (every mode alike)\n", o.Count, o.Size)
	res, err := bench.Interleave(o.Runs, modes, inboxMode.Name, func(run int, m inboxMode) (float64, error) {
		rate, err := benchConsume(ctx, js, topic, fmt.Sprintf("bench-%s-%d-%d", m.name, id, run), m, o.Count)
		if err != nil {
			return 0, err
		}
		fmt.Fprintf(out, "bench.inbox.run%d.%s.msgs_per_sec: %.0f msg/s\n", run, m.name, rate)
		return rate, nil
	}, func(run int, ratios map[string]float64) {
		for _, m := range modes[1:] {
			fmt.Fprintf(out, "bench.inbox.run%d.%s_vs_raw_ratio: %.2f x\n", run, m.name, ratios[m.name])
		}
	})
	if err != nil {
		return err
	}
	for _, m := range modes {
		fmt.Fprintf(out, "bench.inbox.median.%s.msgs_per_sec: %.0f msg/s (%d runs)\n", m.name, bench.MedianOf(res.Rates[m.name]), o.Runs)
	}
	for _, m := range modes[1:] {
		goal := ""
		if m.name == "pebble_inbox" {
			goal = "; goal >= 0.8"
		}
		fmt.Fprintf(out, "bench.inbox.median.%s_vs_raw_ratio: %.2f x (median of %d per-run ratios%s)\n", m.name, bench.MedianOf(res.Ratios[m.name]), o.Runs, goal)
	}
	return nil
}

// benchConsume consumes count events with a new durable consumer through
// m, fetching the next batch while the previous one is processed, and
// returns msgs/s.
func benchConsume(ctx context.Context, js jetstream.JetStream, topic, durable string, m inboxMode, count int) (float64, error) {
	stream := platform.StreamName(topic)
	c, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: durable, AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 10000,
	})
	if err != nil {
		return 0, err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_ = js.DeleteConsumer(dctx, stream, durable)
		cancel()
	}()
	type fetched struct {
		msgs []platform.InboxMsg
		err  error
	}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	batches := make(chan fetched, 1) // one batch fetched ahead
	start := time.Now()
	go func() {
		defer close(batches)
		for got := 0; got < count && fctx.Err() == nil; {
			batch, err := c.Fetch(min(500, count-got), jetstream.FetchMaxWait(2*time.Second))
			var f fetched
			if err == nil {
				for msg := range batch.Messages() {
					f.msgs = append(f.msgs, msg)
				}
				if len(f.msgs) == 0 {
					err = fmt.Errorf("consumed %d of %d, then nothing: %v", got, count, batch.Error())
				}
			}
			f.err = err
			got += len(f.msgs)
			select {
			case batches <- f:
			case <-fctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	done := 0
	for f := range batches {
		if f.err != nil {
			return 0, fmt.Errorf("bench inbox: %s: %w", m.name, f.err)
		}
		if err := m.process(ctx, f.msgs); err != nil {
			return 0, fmt.Errorf("bench inbox: %s: %w", m.name, err)
		}
		done += len(f.msgs)
	}
	if done < count {
		return 0, fmt.Errorf("bench inbox: %s: consumed %d of %d", m.name, done, count)
	}
	return float64(done) / time.Since(start).Seconds(), nil
}
