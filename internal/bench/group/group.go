package group

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/bench"
	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/tick"
	"github.com/msgplatform/platform/internal/tlsconf"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/platform/consumer"
)

// Options configure one run of the group harness; Validate names the
// command's flags.
type Options struct {
	// Count events of Size (as the command's flag gives it, 1KiB) over
	// Keys keys are preloaded, Window in flight, into Topic.
	Count, Keys, Window  int
	Size, Topic          string
	Partitions, Replicas int
	// Members join the group (and as many raw connections drain);
	// Kills of them are killed while Rate events/s are published.
	Members, Kills, Rate int
	// Runs drain runs; throughput figures are medians.
	Runs int
	// Heartbeat and TTL are the members' membership settings.
	Heartbeat, TTL time.Duration
	// Keep keeps the topic and its groups.
	Keep bool
	// InProcess starts a temporary 3-node fabric (SyncAlways on it or
	// not) instead of using the remote platform.
	InProcess, SyncAlways bool
}

// Validate reports every problem at once.
func (o Options) Validate(size int) error {
	var errs []error
	if o.Count < 1 {
		errs = append(errs, fmt.Errorf("--count: must be >= 1, got %d", o.Count))
	}
	if size < 1 || size > 8<<20 {
		errs = append(errs, fmt.Errorf("--size: must be 1..8MiB, got %d", size))
	}
	if o.Partitions < 1 {
		errs = append(errs, fmt.Errorf("--partitions: must be >= 1, got %d", o.Partitions))
	}
	if o.Replicas < 1 || o.Replicas > 5 {
		errs = append(errs, fmt.Errorf("--replicas: must be 1..5, got %d", o.Replicas))
	}
	if o.Keys < 1 {
		errs = append(errs, fmt.Errorf("--keys: must be >= 1, got %d", o.Keys))
	}
	if o.Members < 1 || o.Members > o.Partitions {
		errs = append(errs, fmt.Errorf("--members: must be 1..partitions (%d), got %d", o.Partitions, o.Members))
	}
	if o.Kills < 0 || (o.Kills > 0 && o.Members < 2) {
		errs = append(errs, fmt.Errorf("--kills: must be >= 0, and needs --members >= 2, got %d", o.Kills))
	}
	if o.Runs < 1 || o.Runs > 20 {
		errs = append(errs, fmt.Errorf("--runs: must be 1..20, got %d", o.Runs))
	}
	if o.Window < 1 || o.Window > 65536 {
		errs = append(errs, fmt.Errorf("--window: must be 1..65536, got %d", o.Window))
	}
	if o.Rate < 1 {
		errs = append(errs, fmt.Errorf("--rate: must be >= 1, got %d", o.Rate))
	}
	if o.Heartbeat <= 0 || o.TTL < 2*o.Heartbeat {
		errs = append(errs, fmt.Errorf("--heartbeat/--ttl: heartbeat must be > 0 and ttl at least 2 heartbeats, got %s/%s", o.Heartbeat, o.TTL))
	}
	return errors.Join(errs...)
}

// Run preloads the bench topic, drains it raw and through a consumer
// group in the same run, then kills members one after another while
// events flow, and writes one 'name: value unit' line per figure to out;
// progress goes to progress.
func Run(ctx context.Context, out, progress io.Writer, remote bench.Remote, o Options, size int) error {
	r := &groupBench{o: o, size: size, progress: progress}
	var res groupBenchResult
	var err error
	if o.InProcess {
		res, err = r.runInProcess(ctx)
	} else {
		res, err = r.runAgainst(ctx, remote)
	}
	if err != nil {
		return err
	}
	bench.PrintLines(out, res.lines())
	return nil
}

type groupBenchResult struct {
	raw, group    float64 // msgs/s (medians)
	pauses        []time.Duration
	killsMeasured int
}

func (r groupBenchResult) lines() []string {
	out := []string{
		fmt.Sprintf("bench.group.raw_msgs_per_sec: %.0f msg/s", r.raw),
		fmt.Sprintf("bench.group.group_msgs_per_sec: %.0f msg/s", r.group),
	}
	if r.raw > 0 {
		out = append(out, fmt.Sprintf("bench.group.ratio_vs_raw: %.2f x", r.group/r.raw))
	}
	if len(r.pauses) > 0 {
		s := slices.Clone(r.pauses)
		slices.Sort(s)
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		out = append(out,
			fmt.Sprintf("bench.group.rebalance_pause_p50: %.1f ms", ms(bench.Percentile(s, 0.50))),
			fmt.Sprintf("bench.group.rebalance_pause_p99: %.1f ms", ms(bench.Percentile(s, 0.99))),
			fmt.Sprintf("bench.group.rebalance_pause_max: %.1f ms", ms(s[len(s)-1])),
			fmt.Sprintf("bench.group.rebalance_moved_partitions: %d partitions", len(s)),
			fmt.Sprintf("bench.group.rebalance_kills: %d kills", r.killsMeasured),
		)
	}
	return out
}

// groupBench is one invocation of `bench group`.
type groupBench struct {
	o        Options
	size     int
	progress io.Writer
	// connect opens a new connection to the platform (one per member).
	connect func() (*nats.Conn, error)
	js      jetstream.JetStream
	// applyGroup creates a group on the bench topic.
	applyGroup func(context.Context, platform.GroupSpec) error
	// tracker records the handling of the last drained group.
	tracker *partitionTracker
}

func (b *groupBench) logf(format string, args ...any) {
	fmt.Fprintf(b.progress, "bench group: "+format+"\n", args...)
}

// open opens the bench's own connection with b.connect and b.js on it,
// with room for o.Window publishes in flight.
func (b *groupBench) open() (*nats.Conn, error) {
	nc, err := b.connect()
	if err != nil {
		return nil, err
	}
	if b.js, err = jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(max(b.o.Window*2, 256))); err != nil {
		nc.Close()
		return nil, err
	}
	return nc, nil
}

func (b *groupBench) runInProcess(ctx context.Context) (groupBenchResult, error) {
	dir, err := os.MkdirTemp("", "platformctl-bench-group-")
	if err != nil {
		return groupBenchResult{}, err
	}
	defer os.RemoveAll(dir)
	b.logf("starting a 3-node fabric in %s (sync_always %v)", dir, b.o.SyncAlways)
	f, stop, err := bench.TempFabric(ctx, dir, b.o.SyncAlways, tlsconf.Config{})
	if err != nil {
		return groupBenchResult{}, err
	}
	defer stop()
	b.connect = func() (*nats.Conn, error) { return f.Connect() }
	nc, err := b.open()
	if err != nil {
		return groupBenchResult{}, err
	}
	defer nc.Close()
	rec := catalog.NewReconciler(b.js, catalog.ReconcilerOptions{DefaultReplicas: 3})
	b.applyGroup = func(ctx context.Context, g platform.GroupSpec) error {
		_, err := rec.ApplyGroup(ctx, g, catalog.ApplyOptions{})
		return err
	}
	return b.run(ctx, func(ctx context.Context, t platform.TopicSpec) error {
		_, err := rec.ApplyTopic(ctx, t, catalog.ApplyOptions{AllowReducedReplicas: true})
		return err
	})
}

func (b *groupBench) runAgainst(ctx context.Context, remote bench.Remote) (groupBenchResult, error) {
	b.connect = remote.Connect
	nc, err := b.open()
	if err != nil {
		return groupBenchResult{}, err
	}
	defer nc.Close()
	b.applyGroup = func(ctx context.Context, gs platform.GroupSpec) error {
		return control.Call(ctx, nc, control.SubjGroupApply, control.ApplyGroupRequest{Spec: gs}, nil)
	}
	return b.run(ctx, func(ctx context.Context, t platform.TopicSpec) error {
		return control.Call(ctx, nc, control.SubjTopicApply, control.ApplyTopicRequest{
			Spec: t, Options: catalog.ApplyOptions{AllowReducedReplicas: true},
		}, nil)
	})
}

func (b *groupBench) run(ctx context.Context, applyTopic func(context.Context, platform.TopicSpec) error) (groupBenchResult, error) {
	o := b.o
	spec := bench.TopicSpec(o.Topic, o.Partitions, o.Replicas)
	actx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := applyTopic(actx, spec); err != nil {
		return groupBenchResult{}, fmt.Errorf("create bench topic %s: %w", o.Topic, err)
	}
	var groups []string
	defer b.cleanup(&groups)
	if err := bench.Purge(ctx, b.js, o.Topic); err != nil {
		return groupBenchResult{}, err
	}
	b.logf("preloading %d events of %d bytes over %d keys into %s (%d partitions, R%d)", o.Count, b.size, o.Keys, o.Topic, o.Partitions, o.Replicas)
	if _, _, err := bench.Publish(ctx, b.js, bench.PublishOptions{
		Count: o.Count, Size: b.size, Window: o.Window, Runs: 1, Progress: b.progress,
		Subject: func(i int) string { return platform.TopicSubject(o.Topic, fmt.Sprintf("key-%d", i%o.Keys)) },
	}); err != nil {
		return groupBenchResult{}, fmt.Errorf("preload: %w", err)
	}

	var res groupBenchResult
	var raws, grps []float64
	for run := range o.Runs {
		raw, err := b.drainRaw(ctx, run)
		if err != nil {
			return res, fmt.Errorf("raw consume: %w", err)
		}
		b.logf("run %d/%d: raw consume+ack %.0f msg/s", run+1, o.Runs, raw)
		name := fmt.Sprintf("%s-g%d", o.Topic, run)
		groups = append(groups, name)
		grp, members, err := b.drainGroup(ctx, name)
		if err != nil {
			closeMembers(members)
			return res, fmt.Errorf("group consume: %w", err)
		}
		b.logf("run %d/%d: group of %d members %.0f msg/s (%.2f x raw)", run+1, o.Runs, o.Members, grp, grp/raw)
		raws, grps = append(raws, raw), append(grps, grp)
		if run == o.Runs-1 && o.Kills > 0 {
			res.pauses, res.killsMeasured, err = b.measureRebalance(ctx, name, members)
			if err != nil {
				return res, fmt.Errorf("rebalance: %w", err)
			}
			continue
		}
		closeMembers(members)
	}
	res.raw, res.group = bench.MedianOf(raws), bench.MedianOf(grps)
	return res, nil
}

// cleanup deletes what the bench created unless --keep.
func (b *groupBench) cleanup(groups *[]string) {
	if b.o.Keep {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, s := range []string{platform.StreamName(b.o.Topic), platform.DLQStream(b.o.Topic), platform.DLQEventsStream(b.o.Topic)} {
		_ = b.js.DeleteStream(ctx, s)
	}
	if kv, err := b.js.KeyValue(ctx, consumer.GroupMembersBucket); err == nil {
		for _, g := range *groups {
			if keys, err := kv.ListKeysFiltered(ctx, g+".>"); err == nil {
				for k := range keys.Keys() {
					_ = kv.Purge(ctx, k)
				}
			}
		}
	}
}

// gate holds consumers until the clock starts.
type gate struct {
	open chan struct{}
	once sync.Once
}

func newGate() *gate     { return &gate{open: make(chan struct{})} }
func (g *gate) wait()    { <-g.open }
func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

// drainRaw drains the topic with one plain pull consumer per partition,
// spread over o.Members connections, acking at once; it returns msgs/s.
func (b *groupBench) drainRaw(ctx context.Context, run int) (float64, error) {
	o := b.o
	g := newGate()
	var done atomic.Int64
	finished := make(chan struct{})
	var finishOnce sync.Once
	var conns []*nats.Conn
	var iters []jetstream.MessagesContext
	defer func() {
		for _, it := range iters {
			it.Stop()
		}
		for _, nc := range conns {
			nc.Close()
		}
	}()
	jss := make([]jetstream.JetStream, o.Members)
	for i := range jss {
		nc, err := b.connect()
		if err != nil {
			return 0, err
		}
		conns = append(conns, nc)
		if jss[i], err = jetstream.New(nc); err != nil {
			return 0, err
		}
	}
	stream := platform.StreamName(o.Topic)
	for p := range o.Partitions {
		name := fmt.Sprintf("%s-raw%d-p%d", o.Topic, run, p)
		_, err := b.js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
			Durable: name, FilterSubject: platform.PartitionSubject(o.Topic, p),
			DeliverPolicy: jetstream.DeliverAllPolicy, AckPolicy: jetstream.AckExplicitPolicy,
			AckWait: 30 * time.Second, MaxAckPending: 1000,
		})
		if err != nil {
			return 0, err
		}
		defer func() {
			dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = b.js.DeleteConsumer(dctx, stream, name)
		}()
		// Bind through the connection serving this partition.
		mc, err := jss[p%o.Members].Consumer(ctx, stream, name)
		if err != nil {
			return 0, err
		}
		it, err := mc.Messages(jetstream.PullMaxMessages(256))
		if err != nil {
			return 0, err
		}
		iters = append(iters, it)
		go func() {
			for {
				msg, err := it.Next()
				if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
					return
				}
				if err != nil {
					continue // e.g. a missed heartbeat: the iterator goes on
				}
				g.wait()
				_ = msg.Ack()
				if done.Add(1) == int64(o.Count) {
					finishOnce.Do(func() { close(finished) })
				}
			}
		}()
	}
	time.Sleep(500 * time.Millisecond) // let every consumer fetch
	start := time.Now()
	g.release()
	if err := b.waitDrained(ctx, "raw", &done, start, finished); err != nil {
		return 0, err
	}
	elapsed := time.Since(start)
	return float64(o.Count) / elapsed.Seconds(), nil
}

// waitDrained waits for finished, reporting progress; it fails when
// nothing moves for a minute.
func (b *groupBench) waitDrained(ctx context.Context, what string, done *atomic.Int64, start time.Time, finished chan struct{}) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last, lastMove := int64(-1), time.Now()
	for {
		select {
		case <-finished:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			n := done.Load()
			b.logf("%s: %d/%d (%.0f msg/s)", what, n, b.o.Count, float64(n)/time.Since(start).Seconds())
			if n != last {
				last, lastMove = n, time.Now()
			} else if time.Since(lastMove) > time.Minute {
				return fmt.Errorf("%s: stuck at %d of %d events", what, n, b.o.Count)
			}
		}
	}
}

// benchMember is one member of the bench group with its own connection.
type benchMember struct {
	id int
	nc *nats.Conn
	m  *consumer.Member
}

func closeMembers(ms []*benchMember) {
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = m.m.Close(ctx)
			m.nc.Close()
		}()
	}
	wg.Wait()
}

// partitionTracker records, per partition, when an event was last handled
// and by which member, and watches the partitions of a killed member for
// the first event their new owner handles.
type partitionTracker struct {
	mu         sync.Mutex
	lastAt     []time.Time
	dead       map[int]bool // members killed: their late handling is ignored
	watch      map[int]time.Time
	firstAfter map[int]time.Time
}

func newPartitionTracker(partitions int) *partitionTracker {
	return &partitionTracker{lastAt: make([]time.Time, partitions), dead: map[int]bool{}}
}

func (t *partitionTracker) handled(member, p int) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dead[member] {
		return
	}
	t.lastAt[p] = now
	if _, ok := t.watch[p]; ok {
		if _, seen := t.firstAfter[p]; !seen {
			t.firstAfter[p] = now
		}
	}
}

// kill marks member dead and starts watching its partitions; it returns
// the last time each was handled.
func (t *partitionTracker) kill(member int, parts []int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.dead[member] = true
	t.watch, t.firstAfter = map[int]time.Time{}, map[int]time.Time{}
	for _, p := range parts {
		t.watch[p] = t.lastAt[p]
	}
}

// gaps returns the pause of every watched partition, or false while a
// partition has not resumed.
func (t *partitionTracker) gaps() ([]time.Duration, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []time.Duration
	for p, before := range t.watch {
		after, ok := t.firstAfter[p]
		if !ok {
			return nil, false
		}
		out = append(out, after.Sub(before))
	}
	return out, true
}

// drainGroup starts o.Members members of a new group on the topic, waits
// until they hold every partition, then times the drain. The members are
// returned running (for the rebalance measurement).
func (b *groupBench) drainGroup(ctx context.Context, group string) (float64, []*benchMember, error) {
	o := b.o
	actx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := b.applyGroup(actx, platform.GroupSpec{Name: group, Topic: o.Topic}); err != nil {
		return 0, nil, fmt.Errorf("apply group %s: %w", group, err)
	}
	g := newGate()
	var done atomic.Int64
	finished := make(chan struct{})
	var finishOnce sync.Once
	tracker := newPartitionTracker(o.Partitions)
	var members []*benchMember
	for i := range o.Members {
		m, err := b.startMember(ctx, group, i, g, &done, finished, &finishOnce, tracker)
		if err != nil {
			return 0, members, err
		}
		members = append(members, m)
	}
	b.logf("group %s: %d members joining", group, o.Members)
	if err := waitSettled(ctx, members, o.Partitions, 60*time.Second); err != nil {
		g.release()
		return 0, members, err
	}
	time.Sleep(500 * time.Millisecond) // let every partition fetch
	start := time.Now()
	g.release()
	if err := b.waitDrained(ctx, "group", &done, start, finished); err != nil {
		b.describeStuck(ctx, group, members)
		return 0, members, err
	}
	elapsed := time.Since(start)
	b.tracker = tracker
	return float64(o.Count) / elapsed.Seconds(), members, nil
}

func (b *groupBench) startMember(ctx context.Context, group string, id int, g *gate, done *atomic.Int64, finished chan struct{}, finishOnce *sync.Once, tracker *partitionTracker) (*benchMember, error) {
	nc, err := b.connect()
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	count := int64(b.o.Count)
	m, err := consumer.NewMember(js, consumer.MemberConfig{
		Group: group, ID: fmt.Sprintf("bench-%03d", id), Heartbeat: b.o.Heartbeat, TTL: b.o.TTL,
		// Handlers are held at the gate while the members join: a partition
		// handed over then gives up its held events at once.
		DrainTimeout: 100 * time.Millisecond, NoDLQRouter: true,
		Logger: slog.New(slog.NewTextHandler(b.progress, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}, func(ctx context.Context, msg *consumer.Message) error {
		select {
		case <-g.open:
		case <-ctx.Done():
			// Gated while joining, then handed over: the new owner gets it
			// again (the old one cannot settle it).
			return ctx.Err()
		}
		tracker.handled(id, msg.Partition)
		if done.Add(1) == count {
			finishOnce.Do(func() { close(finished) })
		}
		return nil
	})
	if err != nil {
		nc.Close()
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := m.Start(sctx); err != nil {
		nc.Close()
		return nil, err
	}
	return &benchMember{id: id, nc: nc, m: m}, nil
}

// waitSettled waits until members hold every partition exactly once.
func waitSettled(ctx context.Context, members []*benchMember, partitions int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		held := map[int]bool{}
		dup := false
		for _, m := range members {
			for _, p := range m.m.Partitions() {
				dup = dup || held[p]
				held[p] = true
			}
		}
		if !dup && len(held) == partitions {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("members hold %d of %d partitions after %s", len(held), partitions, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// measureRebalance publishes at o.Rate while killing one member o.Kills
// times; it returns the pause of every partition the dead members held.
// It closes members when done.
func (b *groupBench) measureRebalance(ctx context.Context, group string, members []*benchMember) (pauses []time.Duration, kills int, err error) {
	o := b.o
	tracker := b.tracker
	pctx, stopPub := context.WithCancel(ctx)
	pubDone := make(chan error, 1)
	go func() { pubDone <- b.publishPaced(pctx) }()
	defer func() {
		stopPub()
		if perr := <-pubDone; err == nil && perr != nil {
			err = perr
		}
		closeMembers(members)
	}()
	g := newGate()
	g.release()
	var done atomic.Int64 // counts past o.Count: never finishes
	done.Store(-1 << 62)
	finished := make(chan struct{})
	var once sync.Once
	nextID := len(members)
	for k := range o.Kills {
		time.Sleep(time.Second + o.Heartbeat) // steady flow
		victim := -1
		for i, m := range members {
			if len(m.m.Partitions()) > 0 {
				victim = i
				break
			}
		}
		if victim < 0 {
			return pauses, kills, errors.New("no member holds a partition")
		}
		v := members[victim]
		parts := v.m.Partitions()
		tracker.kill(v.id, parts)
		killedAt := time.Now()
		v.nc.Close() // the process is gone: no heartbeat, no ack
		dead, cancel := context.WithCancel(context.Background())
		cancel()
		_ = v.m.Close(dead) // stop its goroutines: no drain, and it cannot leave
		members = slices.Delete(members, victim, victim+1)
		b.logf("kill %d/%d: member %s held partitions %v", k+1, o.Kills, v.m.ID(), parts)
		deadline := killedAt.Add(3*o.TTL + 30*time.Second)
		for {
			if gs, ok := tracker.gaps(); ok {
				pauses = append(pauses, gs...)
				slices.Sort(gs)
				b.logf("kill %d/%d: %d partitions resumed, pause max %s", k+1, o.Kills, len(gs), gs[len(gs)-1].Round(time.Millisecond))
				break
			}
			if time.Now().After(deadline) {
				return pauses, kills, fmt.Errorf("partitions %v of the killed member did not resume within %s", parts, deadline.Sub(killedAt))
			}
			select {
			case <-ctx.Done():
				return pauses, kills, ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
		kills++
		// A replacement joins, back to o.Members.
		m, err := b.startMember(ctx, group, nextID, g, &done, finished, &once, tracker)
		if err != nil {
			return pauses, kills, err
		}
		nextID++
		members = append(members, m)
		if err := waitSettled(ctx, members, o.Partitions, 3*o.TTL+30*time.Second); err != nil {
			return pauses, kills, err
		}
	}
	return pauses, kills, nil
}

// publishPaced publishes o.Rate events/s until ctx ends.
func (b *groupBench) publishPaced(ctx context.Context) error {
	payload := make([]byte, b.size)
	_, _ = rand.Read(payload)
	const period = 10 * time.Millisecond
	perTick := max(1, b.o.Rate/int(time.Second/period))
	i := 0
	var err error
	tick.Repeat(ctx, period, nil, func(bool) bool {
		for range perTick {
			if _, perr := b.js.PublishAsync(platform.TopicSubject(b.o.Topic, fmt.Sprintf("key-%d", i%b.o.Keys)), payload); perr != nil {
				if ctx.Err() == nil {
					err = fmt.Errorf("publish: %w", perr)
				}
				return false
			}
			i++
		}
		return true
	})
	return err
}

// describeStuck prints, per partition, the group consumer's state and the
// member holding it (to stderr), when a drain stops moving.
func (b *groupBench) describeStuck(ctx context.Context, group string, members []*benchMember) {
	holder := map[int]string{}
	for _, m := range members {
		for _, p := range m.m.Partitions() {
			holder[p] += m.m.ID() + " "
		}
	}
	for p := range b.o.Partitions {
		c, err := b.js.Consumer(ctx, platform.StreamName(b.o.Topic), platform.PartitionConsumer(group, p))
		if err != nil {
			b.logf("partition %d: %v", p, err)
			continue
		}
		i := c.CachedInfo()
		var pins []string
		for _, pg := range i.PriorityGroups {
			pins = append(pins, pg.Group+"="+pg.PinnedClientID)
		}
		b.logf("partition %d: held by [%s] pending %d ack_pending %d redelivered %d waiting %d delivered %d ack_floor %d pins %v",
			p, holder[p], i.NumPending, i.NumAckPending, i.NumRedelivered, i.NumWaiting, i.Delivered.Stream, i.AckFloor.Stream, pins)
	}
}
