package mirror

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/platform/region"
)

// Run starts a temporary two-region fabric, publishes at rate for d to a
// raw topic and to a mirrored one, and writes the publish rates, their
// ratio and the mirror lag to out, one 'name: value unit' line each;
// progress goes to progress.
func Run(ctx context.Context, out, progress io.Writer, rate int, d time.Duration, size int, syncAlways bool) error {
	dir, err := os.MkdirTemp("", "platformctl-bench-mirror-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	trust, err := embeddednats.LoadOrCreateTrust(dir + "/trust")
	if err != nil {
		return err
	}
	cfg := embeddednats.RegionsConfig{LeafPort: -1, Deny: region.LinkDeny([]platform.TopicSpec{{Name: "bench.resident", Residency: "eu"}})}
	for _, name := range []string{"eu", "us"} {
		fc := embeddednats.DefaultFabricConfig()
		fc.Region = embeddednats.Region{Name: name}
		fc.Nodes, fc.Port, fc.ClusterPort = 1, -1, -1
		fc.DataDir = dir + "/" + name
		fc.LameDuck = 200 * time.Millisecond
		fc.Durability.Replicas = 1
		fc.Durability.SyncAlways = syncAlways
		cfg.Fabrics = append(cfg.Fabrics, fc)
	}
	all, err := embeddednats.NewRegions(cfg, trust)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := all.Start(sctx); err != nil {
		return err
	}
	defer all.Close(context.Background())
	var rs region.Regions
	for _, f := range all.Fabrics() {
		nc, err := f.Connect()
		if err != nil {
			return err
		}
		defer nc.Close()
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(8192))
		if err != nil {
			return err
		}
		rs = append(rs, region.Region{Name: f.Config().Region.Name, Domain: f.Config().Region.Domain, JS: js})
	}
	// The residency layer as platformd runs it: the guard and the gate in
	// front of every region's stream create/update API, so the figures
	// include what residency costs.
	guard, err := region.StartGuard(ctx, rs, region.GuardOptions{Gate: &region.GateOptions{
		Account: trust.AdminAccount(),
		Servers: func(region string) []*server.Server {
			var out []*server.Server
			for _, n := range all.Region(region).Nodes() {
				if s := n.Server(); s != nil {
					out = append(out, s)
				}
			}
			return out
		},
	}})
	if err != nil {
		return fmt.Errorf("residency guard: %w", err)
	}
	defer guard.Stop()
	rec := catalog.NewReconciler(rs[0].JS, catalog.ReconcilerOptions{DefaultReplicas: 1})
	for _, name := range []string{"bench.raw", "bench.mirrored"} {
		t := platform.DefaultTopicSpec(name)
		t.Replicas = 1
		if _, err := rec.ApplyTopic(ctx, t, catalog.ApplyOptions{AllowReducedReplicas: true}); err != nil {
			return err
		}
	}
	if _, err := rs.Mirror(ctx, region.MirrorRequest{Topic: "bench.mirrored", To: "us"}); err != nil {
		return err
	}
	count := int(float64(rate) * d.Seconds())

	fmt.Fprintf(progress, "raw: %d events at %d/s\n", count, rate)
	rawRate, _, err := pacedPublish(ctx, rs[0].JS, "bench.raw", rate, count, size)
	if err != nil {
		return err
	}

	// The reader in us: arrival time minus the publish time in the event.
	var mu sync.Mutex
	lags := make([]time.Duration, 0, count)
	var last time.Time
	done := make(chan struct{})
	oc, err := rs[1].JS.OrderedConsumer(ctx, platform.StreamName("bench.mirrored"), jetstream.OrderedConsumerConfig{})
	if err != nil {
		return err
	}
	cc, err := oc.Consume(func(m jetstream.Msg) {
		now := time.Now()
		if len(m.Data()) < 8 {
			return
		}
		sent := time.Unix(0, int64(binary.BigEndian.Uint64(m.Data())))
		mu.Lock()
		lags = append(lags, now.Sub(sent))
		last = now
		if len(lags) == count {
			close(done)
		}
		mu.Unlock()
	})
	if err != nil {
		return err
	}
	defer cc.Stop()
	fmt.Fprintf(progress, "mirrored: %d events at %d/s\n", count, rate)
	mirRate, start, err := pacedPublish(ctx, rs[0].JS, "bench.mirrored", rate, count, size)
	if err != nil {
		return err
	}
	select {
	case <-done:
	case <-time.After(30 * time.Second):
	case <-ctx.Done():
		return ctx.Err()
	}
	mu.Lock()
	defer mu.Unlock()
	got := len(lags)
	if got == 0 {
		return errors.New("bench mirror: the mirror in us received nothing")
	}
	sort.Slice(lags, func(i, j int) bool { return lags[i] < lags[j] })
	pct := func(p float64) float64 {
		return float64(lags[min(int(p*float64(got)), got-1)].Microseconds()) / 1000
	}
	mirrorRate := float64(got) / last.Sub(start).Seconds()
	fmt.Fprintf(out, "mirror_target_rate: %d events/s\n", rate)
	fmt.Fprintf(out, "mirror_event_size: %d bytes\n", size)
	fmt.Fprintf(out, "mirror_sync_always: %t\n", syncAlways)
	fmt.Fprintf(out, "mirror_raw_publish_rate: %.0f events/s\n", rawRate)
	fmt.Fprintf(out, "mirror_mirrored_publish_rate: %.0f events/s\n", mirRate)
	fmt.Fprintf(out, "mirror_publish_ratio_mirrored_vs_raw: %.3f ratio\n", mirRate/rawRate)
	fmt.Fprintf(out, "mirror_events_received: %d of %d events\n", got, count)
	fmt.Fprintf(out, "mirror_lag_p50: %.1f ms\n", pct(0.50))
	fmt.Fprintf(out, "mirror_lag_p99: %.1f ms\n", pct(0.99))
	fmt.Fprintf(out, "mirror_lag_max: %.1f ms\n", float64(lags[got-1].Microseconds())/1000)
	fmt.Fprintf(out, "mirror_throughput_ratio: %.3f ratio (mirror events/s over source publish events/s)\n", mirrorRate/mirRate)
	return nil
}

// pacedPublish publishes count events of size bytes to topic at rate per
// second (async, in 10 ms slices), each carrying its publish time in its
// first 8 bytes, and returns the acknowledged rate and the start time.
func pacedPublish(ctx context.Context, js jetstream.JetStream, topic string, rate, count, size int) (float64, time.Time, error) {
	perTick := max(rate/100, 1)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	sent := 0
	for sent < count {
		for range min(perTick, count-sent) {
			buf := make([]byte, size)
			binary.BigEndian.PutUint64(buf, uint64(time.Now().UnixNano()))
			m := nats.NewMsg(platform.TopicSubject(topic, fmt.Sprintf("k%d", sent%64)))
			m.Data = buf
			if _, err := js.PublishMsgAsync(m, jetstream.WithStallWait(10*time.Second)); err != nil {
				return 0, start, fmt.Errorf("bench mirror: publish: %w", err)
			}
			sent++
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return 0, start, ctx.Err()
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		return 0, start, errors.New("bench mirror: acks did not arrive within 30s")
	}
	return float64(count) / time.Since(start).Seconds(), start, nil
}
