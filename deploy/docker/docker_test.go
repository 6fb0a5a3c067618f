package docker_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/dockertest"
)

// The topic declared in node.yaml; its stream has the same name.
const (
	topic  = "orders"
	stream = "orders"
)

// nodes are the compose services of the region, in order.
var nodes = []string{"n1", "n2", "n3"}

// TestDockerRegionSurvivesNodeKills runs the region of compose.yaml (three
// platformd containers) and kills containers under a continuous publisher:
// one node down, publishing goes on; two down, publishes fail fast and the
// committed data stays readable from the survivor; both back, every
// acknowledged event is in the stream and publishing works again. It is
// the container version of embeddednats/fabric_test.go: real processes,
// SIGKILL, real volumes, traffic through published loopback ports only.
func TestDockerRegionSurvivesNodeKills(t *testing.T) {
	r := startRegion(t)

	nc := r.connect(t)
	js := natstest.JetStream(t, nc)
	r.waitStream(t, js, 3)

	// Every port is TLS: a plaintext client and rogue routes are refused
	// and change nothing.
	r.attackTransport(t, js)

	p := &publisher{js: js, run: dockertest.RandHex(4), acked: map[string]uint64{}}
	stop := p.start(4)
	defer stop()
	dockertest.WaitFor(t, 30*time.Second, "300 acks before the first kill", func() error {
		if n := p.ackedCount(); n < 300 {
			return fmt.Errorf("%d acked", n)
		}
		return nil
	})

	// 1. Kill the stream leader, the worst node to lose: publishing goes on.
	first := r.waitStream(t, js, 3)
	acked1, fails1 := p.ackedCount(), p.fails.Load()
	r.kill(t, first)
	kill1 := time.Now()
	during1 := p.ackedCount() - acked1
	dockertest.WaitFor(t, 45*time.Second, "500 acks after the first kill", func() error {
		if n := p.ackedCount() - acked1; n < 500 {
			return fmt.Errorf("%d acked since the kill of %s", n, first)
		}
		return nil
	})
	resumed := p.firstAckStartedAfter(kill1).Sub(kill1)
	t.Logf("kill 1 (%s, stream leader): acked before %d, while `docker kill` ran %d, after %d; failed publishes %d; a publish started %s after the kill was the first acked again",
		first, acked1, during1, p.ackedCount()-acked1-during1, p.fails.Load()-fails1, resumed.Round(time.Millisecond))

	// 2. Kill a second node: no quorum, no ack.
	second := r.waitStream(t, js, 2)
	survivor := ""
	for _, n := range nodes {
		if n != first && n != second {
			survivor = n
		}
	}
	// Events acked by now were committed on both remaining nodes; the
	// publishes that follow carry the commit to the survivor. A follower
	// serves direct gets once its direct-access monitor (a 2 s tick in
	// nats-server 2.15) has seen it current: wait for one tick more.
	committed := p.snapshot()
	time.Sleep(2500 * time.Millisecond)
	acked2, fails2 := p.ackedCount(), p.fails.Load()
	r.kill(t, second)
	kill2 := time.Now()
	during2 := p.ackedCount() - acked2
	time.Sleep(4 * time.Second) // every publish in flight ends (3 s timeout)
	stop()
	after2 := p.ackedCount() - acked2 - during2
	if after2 > 8 { // at most the 4 publishes in flight when the container died
		t.Errorf("%d publishes acknowledged after the second kill returned, with 1 of 3 nodes up", after2)
	}
	n, slow, errs := p.failuresSince(kill2)
	t.Logf("kill 2 (%s): acked between the kills %d, while `docker kill` ran %d, after %d; failed publishes %d (%d started after the kill, slowest to fail %s: %s)",
		second, acked2-acked1, during2, after2, p.fails.Load()-fails2, n, slow.Round(time.Millisecond), errs)

	dockertest.WaitFor(t, 15*time.Second, "client reconnected to the survivor "+survivor, func() error {
		if !nc.IsConnected() || nc.ConnectedUrl() != r.natsURL(survivor) {
			return fmt.Errorf("status %v, url %q", nc.Status(), nc.ConnectedUrl())
		}
		return nil
	})
	var slowest time.Duration
	for i := range 5 {
		d, err := p.publishOne(context.Background(), 3*time.Second)
		if err == nil {
			t.Fatalf("probe %d: publish acknowledged with 2 of 3 nodes down", i)
		}
		if d > 3500*time.Millisecond {
			t.Errorf("probe %d: publish took %s to fail, want <= ~3s", i, d)
		}
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, jetstream.ErrNoStreamResponse) && !errors.Is(err, nats.ErrNoResponders) && !errors.Is(err, nats.ErrTimeout) {
			t.Errorf("probe %d: unexpected publish error: %v", i, err)
		}
		slowest = max(slowest, d)
		t.Logf("probe %d with 2 of 3 down: refused after %s: %v", i, d.Round(time.Millisecond), err)
	}
	t.Logf("time-to-fail with 2 of 3 down: slowest of 5 probes %s", slowest.Round(time.Millisecond))

	// Committed data stays readable from the survivor without a leader.
	readCommitted(t, nc, committed)

	// 3. Restart both: quorum is back, nothing acknowledged is lost.
	r.start(t, first, second)
	restarted := time.Now()
	// Generous: on a loaded machine a restarted container's routes can
	// take minutes to resolve their peers' names.
	r.waitReady(t, 180*time.Second)
	r.waitStream(t, js, 3)
	t.Logf("both restarted, region ready and stream current after %s", time.Since(restarted).Round(time.Millisecond))
	p.assertAllPresent(t, js)

	ok := 0
	dockertest.WaitFor(t, 30*time.Second, "20 publishes acknowledged after the restart", func() error {
		for ok < 20 {
			if _, err := p.publishOne(context.Background(), 5*time.Second); err != nil {
				return err
			}
			ok++
		}
		return nil
	})
	t.Logf("publishing works again: %d acked after the restart; totals: acked %d, failed %d", ok, p.ackedCount(), p.fails.Load())
}

// publisher publishes continuously with unique Nats-Msg-Ids and records
// every acknowledged id with its stream sequence.
type publisher struct {
	js    jetstream.JetStream
	run   string
	next  atomic.Int64
	fails atomic.Int64

	mu       sync.Mutex
	acked    map[string]uint64
	starts   []time.Time // start time of each acked publish, in ack order
	failures []failure
}

// failure is a publish that got no ack.
type failure struct {
	start time.Time
	took  time.Duration
	err   error
}

func (p *publisher) publishOne(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	n := p.next.Add(1)
	id := fmt.Sprintf("evt-%s-%d", p.run, n)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	ack, err := p.js.Publish(ctx, fmt.Sprintf("%s.order:HC-%d", topic, n%97), []byte(id), jetstream.WithMsgID(id))
	d := time.Since(start)
	if errors.Is(err, context.Canceled) {
		return d, err // stopped by the test, not refused
	}
	if err != nil {
		p.fails.Add(1)
		p.mu.Lock()
		p.failures = append(p.failures, failure{start: start, took: d, err: err})
		p.mu.Unlock()
		return d, err
	}
	p.mu.Lock()
	p.acked[id] = ack.Sequence
	p.starts = append(p.starts, start)
	p.mu.Unlock()
	return d, nil
}

// start runs workers publishing until the returned stop is called (stop
// waits for them and is idempotent).
func (p *publisher) start(workers int) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				if _, err := p.publishOne(ctx, 3*time.Second); err != nil && ctx.Err() == nil {
					time.Sleep(50 * time.Millisecond)
				}
			}
		})
	}
	return func() { cancel(); wg.Wait() }
}

func (p *publisher) ackedCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.acked)
}

func (p *publisher) snapshot() map[string]uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]uint64, len(p.acked))
	for k, v := range p.acked {
		out[k] = v
	}
	return out
}

// failuresSince counts the failed publishes started after t, the longest
// one took to fail, and their distinct errors.
func (p *publisher) failuresSince(t time.Time) (n int, slowest time.Duration, errs string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	seen := map[string]int{}
	for _, f := range p.failures {
		if f.start.After(t) {
			n++
			slowest = max(slowest, f.took)
			seen[f.err.Error()]++
		}
	}
	var parts []string
	for e, c := range seen {
		parts = append(parts, fmt.Sprintf("%dx %q", c, e))
	}
	slices.Sort(parts)
	return n, slowest, strings.Join(parts, ", ")
}

// firstAckStartedAfter is when the earliest acked publish started after t
// (zero if none).
func (p *publisher) firstAckStartedAfter(t time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	var first time.Time
	for _, s := range p.starts {
		if s.After(t) && (first.IsZero() || s.Before(first)) {
			first = s
		}
	}
	return first
}

// ordersStream is the orders stream and its info, read within ctx; it
// fails the test when they cannot be read.
func ordersStream(t *testing.T, ctx context.Context, js jetstream.JetStream) (jetstream.Stream, *jetstream.StreamInfo) {
	t.Helper()
	s, info, err := dockertest.StreamInfo(ctx, js, stream)
	if err != nil {
		t.Fatal(err)
	}
	return s, info
}

// assertAllPresent reads the whole stream and checks that every acked id
// is in it, at the sequence its ack named.
func (p *publisher) assertAllPresent(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, info := ordersStream(t, ctx, js)
	last := info.State.LastSeq
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatalf("ordered consumer: %v", err)
	}
	seen := make(map[string]uint64, last)
	var seq uint64
	for seq < last && ctx.Err() == nil {
		b, err := c.Fetch(1000, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Logf("fetch: %v (at seq %d of %d)", err, seq, last)
			continue
		}
		for m := range b.Messages() {
			md, err := m.Metadata()
			if err != nil {
				t.Fatalf("metadata: %v", err)
			}
			seq = md.Sequence.Stream
			seen[string(m.Data())] = seq
		}
		if b.Error() != nil && !errors.Is(b.Error(), nats.ErrTimeout) {
			t.Logf("fetch: %v (at seq %d of %d)", b.Error(), seq, last)
		}
	}
	if seq < last {
		t.Fatalf("read only up to seq %d of %d in 60s", seq, last)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var lost, moved []string
	for id, want := range p.acked {
		got, ok := seen[id]
		switch {
		case !ok:
			lost = append(lost, id)
		case got != want:
			moved = append(moved, fmt.Sprintf("%s at %d, acked as %d", id, got, want))
		}
	}
	t.Logf("acknowledged %d, lost %d; stream holds %d messages (last seq %d; the extra ones are publishes whose ack never arrived)",
		len(p.acked), len(lost), len(seen), last)
	if len(lost) > 0 {
		slices.Sort(lost)
		t.Fatalf("acknowledged events lost: %d of %d, e.g. %v", len(lost), len(p.acked), lost[:min(10, len(lost))])
	}
	if len(moved) > 0 {
		t.Fatalf("acknowledged events at another sequence than acked: %d, e.g. %v", len(moved), moved[:min(10, len(moved))])
	}
}

// readCommitted reads a sample of the committed events from the node nc is
// connected to with direct gets, which any replica serves without a
// stream leader.
func readCommitted(t *testing.T, nc *nats.Conn, committed map[string]uint64) {
	t.Helper()
	bySeq := make(map[uint64]string, len(committed))
	seqs := make([]uint64, 0, len(committed))
	for id, seq := range committed {
		bySeq[seq] = id
		seqs = append(seqs, seq)
	}
	slices.Sort(seqs)
	var sample []uint64
	step := max(1, len(seqs)/100)
	for i := 0; i < len(seqs); i += step {
		sample = append(sample, seqs[i])
	}
	sample = append(sample, seqs[len(seqs)-1])
	start := time.Now()
	deadline := start.Add(15 * time.Second)
	for _, seq := range sample {
		var resp *nats.Msg
		var err error
		for { // the client may still be settling on the survivor
			resp, err = nc.Request("$JS.API.DIRECT.GET."+stream, []byte(fmt.Sprintf(`{"seq":%d}`, seq)), 2*time.Second)
			if err == nil || time.Now().After(deadline) {
				break
			}
			t.Logf("direct get seq %d: %v (retrying)", seq, err)
			time.Sleep(250 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("direct get seq %d with 2 of 3 nodes down: %v", seq, err)
		}
		if st := resp.Header.Get("Status"); st != "" {
			t.Fatalf("direct get seq %d with 2 of 3 nodes down: status %s %s", seq, st, resp.Header.Get("Description"))
		}
		if string(resp.Data) != bySeq[seq] {
			t.Fatalf("direct get seq %d = %q, want %q", seq, resp.Data, bySeq[seq])
		}
	}
	t.Logf("direct get with 2 of 3 down: %d committed events sampled (of %d acked before the second kill, seq %d..%d) read back from the survivor in %s",
		len(sample), len(seqs), seqs[0], seqs[len(seqs)-1], time.Since(start).Round(time.Millisecond))
}

// region is a running compose project of compose.yaml.
type region struct {
	*dockertest.Rig
}

// startRegion builds the image, starts the region and waits until every
// node is ready. Everything it creates is removed when the test ends.
func startRegion(t *testing.T) *region {
	t.Helper()
	return &region{dockertest.StartRig(t, dockertest.RigSpec{
		Name: "docker", Image: "platformd", Project: "platformdtest",
		Files: []string{"node.yaml"}, TLSHosts: nodes, Nodes: nodes, LogTail: 300, Ready: 90 * time.Second,
	})}
}

func (r *region) natsURL(n string) string { return r.URLs(n)[0] }

// connect connects as the platform admin to the three published ports
// (Rig.Connect).
func (r *region) connect(t *testing.T) *nats.Conn {
	t.Helper()
	return r.Connect(t, "docker-test", 100*time.Millisecond, nodes...)
}

// kill stops node's container at once (SIGKILL), as a crash would.
func (r *region) kill(t *testing.T, n string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "kill", r.Containers[n]).CombinedOutput(); err != nil {
		t.Fatalf("docker kill %s: %v\n%s", n, err, out)
	}
}

// start starts the stopped containers of ns again.
func (r *region) start(t *testing.T, ns ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := []string{"start"}
	for _, n := range ns {
		args = append(args, r.Containers[n])
	}
	if out, err := exec.CommandContext(ctx, "docker", args...).CombinedOutput(); err != nil {
		t.Fatalf("docker start %v: %v\n%s", ns, err, out)
	}
}

// waitReady polls /readyz on every node's published HTTP port.
func (r *region) waitReady(t *testing.T, timeout time.Duration) {
	t.Helper()
	dockertest.WaitReady(t, timeout, "every node ready (/readyz 200)", r.TLS, r.HTTPPort, nodes...)
}

// waitStream waits until the topic's stream is R3 with a leader and at
// least want-1 current followers, and returns the leader's name.
func (r *region) waitStream(t *testing.T, js jetstream.JetStream, want int) string {
	t.Helper()
	var leader string
	dockertest.WaitFor(t, 60*time.Second, fmt.Sprintf("stream %s with a leader and %d current replicas", stream, want), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		info := s.CachedInfo()
		if info.Config.Replicas != 3 || !info.Config.AllowDirect {
			t.Fatalf("stream %s: replicas %d, allow_direct %v; want 3, true", stream, info.Config.Replicas, info.Config.AllowDirect)
		}
		if info.Cluster == nil || info.Cluster.Leader == "" {
			return errors.New("no leader")
		}
		current := 1
		for _, p := range info.Cluster.Replicas {
			if p.Current && !p.Offline {
				current++
			}
		}
		if current < want {
			return fmt.Errorf("leader %s, %d current replicas", info.Cluster.Leader, current)
		}
		leader = info.Cluster.Leader
		return nil
	})
	if !slices.Contains(nodes, leader) {
		t.Fatalf("stream leader %q is not one of %v", leader, nodes)
	}
	return leader
}
