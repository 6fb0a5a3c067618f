package embeddednats_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/embeddednats/natstest"
)

func createR3(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{
			Name: "EVENTS", Subjects: []string{"events.>"}, Replicas: 3, Storage: jetstream.FileStorage,
			AllowDirect: true,
		})
		// A fabric just started may not have every peer's first report
		// at the meta leader yet: "no suitable peers for placement, peer
		// offline" (10005) for a moment.
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == 10005 && ctx.Err() == nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatalf("create stream: %v", err)
		}
		return
	}
}

// publisher publishes continuously with unique ids and records every
// acknowledged id.
type publisher struct {
	js    jetstream.JetStream
	mu    sync.Mutex
	acked map[string]uint64
	fails atomic.Int64
	next  atomic.Int64
}

func (p *publisher) publishOne(ctx context.Context, timeout time.Duration) error {
	id := fmt.Sprintf("evt-%d", p.next.Add(1))
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ack, err := p.js.Publish(cctx, "events."+id, []byte(id), jetstream.WithMsgID(id))
	if err != nil {
		p.fails.Add(1)
		return err
	}
	p.mu.Lock()
	p.acked[id] = ack.Sequence
	p.mu.Unlock()
	return nil
}

func (p *publisher) ackedCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.acked)
}

// assertAllPresent reads the whole stream and checks every acked id is in it.
func (p *publisher) assertAllPresent(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	seen := map[string]bool{}
	natstest.WaitFor(t, 60*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, "EVENTS")
		if err != nil {
			return err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		// An ordered consumer reads the whole stream from the leader.
		c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
		if err != nil {
			return err
		}
		for len(seen) < int(info.State.Msgs) {
			batch, err := c.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
			if err != nil {
				return err
			}
			n := 0
			for m := range batch.Messages() {
				seen[string(m.Data())] = true
				n++
			}
			if n == 0 {
				return fmt.Errorf("read %d of %d messages", len(seen), info.State.Msgs)
			}
		}
		return nil
	})
	p.mu.Lock()
	defer p.mu.Unlock()
	lost := 0
	for id := range p.acked {
		if !seen[id] {
			lost++
		}
	}
	if lost != 0 {
		t.Fatalf("acknowledged events lost: %d of %d", lost, len(p.acked))
	}
	t.Logf("acknowledged %d, all present (%d in stream)", len(p.acked), len(seen))
}

func TestKillOneNodeLosesNoAckedWrites(t *testing.T) {
	f := natstest.RunFabric(t, 3)
	js := f.JetStream()
	createR3(t, js)
	p := &publisher{js: js, acked: map[string]uint64{}}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			_ = p.publishOne(ctx, 2*time.Second)
		}
	}()
	natstest.WaitFor(t, 10*time.Second, func() error {
		if p.ackedCount() < 200 {
			return fmt.Errorf("only %d acked", p.ackedCount())
		}
		return nil
	})
	// Kill the stream leader's node: the worst node to lose.
	leader := streamLeader(t, js)
	f.Kill(leader)
	before := p.ackedCount()
	natstest.WaitFor(t, 20*time.Second, func() error {
		if p.ackedCount() < before+500 {
			return fmt.Errorf("publishing has not continued: %d acked since kill", p.ackedCount()-before)
		}
		return nil
	})
	cancel()
	<-done
	t.Logf("publishes acked after the kill: %d, failed during failover: %d", p.ackedCount()-before, p.fails.Load())
	p.assertAllPresent(t, js)
	f.Restart(leader)
	p.assertAllPresent(t, js)
}

func TestKillTwoNodesRefusesWritesKeepsData(t *testing.T) {
	f := natstest.RunFabric(t, 3)
	js := f.JetStream()
	createR3(t, js)
	p := &publisher{js: js, acked: map[string]uint64{}}
	ctx := context.Background()
	for range 300 {
		if err := p.publishOne(ctx, 5*time.Second); err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	f.WaitReplicasCurrent(js, "EVENTS")
	f.Kill(1)
	f.Kill(2)

	// Writes fail fast with a clear error: no quorum, so no ack.
	start := time.Now()
	err := p.publishOne(ctx, 3*time.Second)
	if err == nil {
		t.Fatal("publish with 2 of 3 nodes down was acknowledged")
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("publish took %s to fail", d)
	}
	t.Logf("publish refused after %s: %v", time.Since(start).Round(time.Millisecond), err)
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, jetstream.ErrNoStreamResponse) && !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, nats.ErrTimeout) {
		t.Fatalf("unexpected publish error: %v", err)
	}

	// Committed data is still readable from the surviving node: direct
	// gets are served by any replica, with or without a leader.
	nc0 := f.NodeConn(0)
	for _, seq := range []int{1, 150, 300} {
		resp, err := nc0.Request("$JS.API.DIRECT.GET.EVENTS", []byte(fmt.Sprintf(`{"seq":%d}`, seq)), 3*time.Second)
		if err != nil {
			t.Fatalf("direct get seq %d with 2 nodes down: %v", seq, err)
		}
		if st := resp.Header.Get("Status"); st != "" {
			t.Fatalf("direct get seq %d: status %s %s", seq, st, resp.Header.Get("Description"))
		}
		if want := fmt.Sprintf("evt-%d", seq); string(resp.Data) != want {
			t.Fatalf("direct get seq %d = %q, want %q", seq, resp.Data, want)
		}
	}

	f.Restart(1)
	f.Restart(2)
	p.assertAllPresent(t, js)
	if err := p.publishOne(ctx, 10*time.Second); err != nil {
		t.Fatalf("publish after restart: %v", err)
	}
}

func streamLeader(t *testing.T, js jetstream.JetStream) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, "EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	info := s.CachedInfo()
	for i := range 3 {
		if info.Cluster != nil && info.Cluster.Leader == fmt.Sprintf("test-n%d", i+1) {
			return i
		}
	}
	t.Fatalf("no leader in %+v", info.Cluster)
	return -1
}

func TestIsolateNodeLosesQuorumOnMinoritySide(t *testing.T) {
	f := natstest.RunFabric(t, 3)
	js := f.JetStream()
	createR3(t, js)
	f.Isolate(0)
	// A client pinned to the isolated node cannot get writes acknowledged.
	njs := natstest.JetStream(t, f.NodeConn(0))
	natstest.WaitFor(t, 15*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		if _, err := njs.Publish(ctx, "events.x", []byte("x")); err == nil {
			return errors.New("isolated node still acknowledges writes")
		}
		return nil
	})
	// The majority side keeps accepting writes.
	mjs := natstest.JetStream(t, f.NodeConn(1))
	natstest.WaitFor(t, 15*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := mjs.Publish(ctx, "events.y", []byte("y"))
		return err
	})
	f.Heal(0)
	natstest.WaitFor(t, 20*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := njs.Publish(ctx, "events.z", []byte("z"))
		return err
	})
}

func TestTrustFilesArePrivate(t *testing.T) {
	dir := t.TempDir()
	tr, err := embeddednats.LoadOrCreateTrust(filepath.Join(dir, "trust"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := tr.WriteCreds(filepath.Join(dir, "creds"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{p, filepath.Join(dir, "creds", "sys.creds"), filepath.Join(dir, "trust", "trust.json")} {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", f, st.Mode().Perm())
		}
	}
	again, err := embeddednats.LoadOrCreateTrust(filepath.Join(dir, "trust"))
	if err != nil {
		t.Fatal(err)
	}
	if again.AdminAccount() != tr.AdminAccount() {
		t.Fatal("trust was regenerated instead of loaded")
	}
	// A corrupted trust file is refused, not silently replaced.
	if err := os.WriteFile(filepath.Join(dir, "trust", "trust.json"), []byte(`{"operator_jwt":"x"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := embeddednats.LoadOrCreateTrust(filepath.Join(dir, "trust")); err == nil {
		t.Fatal("corrupted trust accepted")
	}
}

func TestPortInUseIsNamed(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cfg := embeddednats.DefaultConfig()
	cfg.Port = l.Addr().(*net.TCPAddr).Port
	cfg.StoreDir = t.TempDir()
	cfg.Durability.Replicas = 1
	tr, err := embeddednats.NewTrust()
	if err != nil {
		t.Fatal(err)
	}
	n, err := embeddednats.NewNode(cfg, tr)
	if err != nil {
		t.Fatal(err)
	}
	err = n.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("client port %d", cfg.Port)) {
		t.Fatalf("start on a used port: err = %v, want it to name the client port", err)
	}
}

func TestConfigValidateReportsEveryProblem(t *testing.T) {
	cfg := embeddednats.Config{Name: "bad name!", Host: "nowhere", Port: 70000, StoreDir: "",
		Cluster: embeddednats.ClusterListen{Routes: []string{"http://x"}}, Tags: []string{"UPPER"},
		Durability: embeddednats.Durability{Replicas: 9}, ReadyTimeout: time.Second}
	err := cfg.Validate()
	if !errors.Is(err, embeddednats.ErrInvalidConfig) {
		t.Fatalf("err = %v, want ErrInvalidConfig", err)
	}
	for _, key := range []string{"name:", "host:", "port: must be 1..65535", "store_dir:", "cluster.port: routes are set", "tags[0]:", "durability.replicas: must be 1..5, got 9", "region.name"} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("error does not name %q:\n%v", key, err)
		}
	}
}
