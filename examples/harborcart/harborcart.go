package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/platform/consumer"
	"github.com/msgplatform/platform/platform/dlq"
)

// Names of the HarborCart objects the example uses. The orders topic, its
// groups and the shipment-jobs queue are declared in conf/dev.yaml; the
// example applies the groups again (idempotent) and a demo copy of the
// queue with a short lease, so a crashed worker's job comes back in
// seconds instead of shipment-jobs' 60.
const (
	Topic     = "orders"
	DemoQueue = "shipment-jobs-demo"
	Tenant    = "harbor-retail"
)

// Groups are the consumer groups of orders in the guide.
var Groups = []string{"email-notifier", "sales-analytics", "fraud-monitor"}

// Config configures a run.
type Config struct {
	Server  string
	Creds   string
	Orders  int
	Lease   time.Duration
	Timeout time.Duration
}

// DefaultConfig returns the settings for the dev fabric of conf/dev.yaml.
func DefaultConfig() Config {
	return Config{
		Server: "nats://127.0.0.1:4222", Creds: "data/creds/admin.creds",
		Orders: 5, Lease: 3 * time.Second, Timeout: 2 * time.Minute,
	}
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if c.Server == "" {
		errs = append(errs, errors.New("server: required"))
	}
	if c.Creds == "" {
		errs = append(errs, errors.New("creds: required"))
	}
	if c.Orders < 2 || c.Orders > 1000 {
		errs = append(errs, fmt.Errorf("orders: must be 2..1000, got %d", c.Orders))
	}
	if c.Lease < time.Second {
		errs = append(errs, fmt.Errorf("lease: must be >= 1s, got %s", c.Lease))
	}
	if c.Timeout < 10*time.Second {
		errs = append(errs, fmt.Errorf("timeout: must be >= 10s, got %s", c.Timeout))
	}
	return errors.Join(errs...)
}

// ChecksFailedError lists the checks that did not hold.
type ChecksFailedError struct{ Failed []string }

func (e *ChecksFailedError) Error() string {
	return fmt.Sprintf("%d checks failed: %s", len(e.Failed), strings.Join(e.Failed, "; "))
}

// Order is the event checkout publishes.
type Order struct {
	OrderID string  `json:"orderId"`
	Email   string  `json:"email"`
	Items   int     `json:"items"`
	Total   float64 `json:"total"`
}

// printer writes timestamped steps; handlers print concurrently.
type printer struct {
	mu    sync.Mutex
	out   io.Writer
	start time.Time
}

func (p *printer) say(who, format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.out, "%6.2fs  %-22s %s\n", time.Since(p.start).Seconds(), who, fmt.Sprintf(format, args...))
}

// state is what the consumers observed, for the checks.
type state struct {
	mu       sync.Mutex
	handled  map[string]map[string]int // group -> event id -> attempt that succeeded
	repeats  map[string]int            // group -> deliveries caught by the inbox
	revenue  float64
	flagged  []string
	shipped  map[string]int // order id -> attempt
	crashJob string         // order id of the job the crashed worker held
	crashAt  time.Time
	backAt   time.Duration // crash -> job handled again
}

// Run runs the example against the platform at cfg.Server and returns nil
// when every check holds, a *ChecksFailedError when one does not.
func Run(ctx context.Context, cfg Config, out io.Writer) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	p := &printer{out: out, start: time.Now()}
	// connect opens a connection named name and its JetStream; the
	// caller closes the connection.
	connect := func(name string) (*nats.Conn, jetstream.JetStream, error) {
		if _, err := os.Stat(cfg.Creds); err != nil {
			return nil, nil, fmt.Errorf("credentials %s: %w (start platformd first: it writes <data-dir>/creds/admin.creds)", cfg.Creds, err)
		}
		nc, err := nats.Connect(cfg.Server, nats.UserCredentials(cfg.Creds), nats.Name("harborcart "+name), nats.Timeout(5*time.Second))
		if err != nil {
			return nil, nil, fmt.Errorf("connect to %s: %w", cfg.Server, err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
		return nc, js, nil
	}
	nc, js, err := connect("checkout")
	if err != nil {
		return err
	}
	defer nc.Close()

	// 1. The objects.
	for _, g := range Groups {
		var ch catalog.Change
		if err := control.Call(ctx, nc, control.SubjGroupApply, control.ApplyGroupRequest{Spec: platform.GroupSpec{Name: g, Topic: Topic}}, &ch); err != nil {
			return fmt.Errorf("apply group %s: %w", g, err)
		}
		p.say("setup", "group %s on %s: %s", g, Topic, actionOf(ch))
	}
	q := platform.DefaultQueueSpec(DemoQueue)
	q.Lease, q.Owner = cfg.Lease, "fulfilment-team"
	var ch catalog.Change
	if err := control.Call(ctx, nc, control.SubjQueueApply, control.ApplyQueueRequest{Spec: q}, &ch); err != nil {
		return fmt.Errorf("apply queue %s: %w", DemoQueue, err)
	}
	p.say("setup", "queue %s (lease %s, %d attempts, like shipment-jobs but a short lease): %s", DemoQueue, q.Lease, q.MaxAttempts, actionOf(ch))

	// This run's orders: HC-<base+i>, so a second run is not deduplicated
	// against the first (event ids are the stream's dedupe key).
	base := (time.Now().Unix() % 1_000_000) * 1000
	var orders []Order
	for i := 1; i <= cfg.Orders; i++ {
		id := fmt.Sprintf("HC-%d", base+int64(i))
		orders = append(orders, Order{OrderID: id, Email: fmt.Sprintf("customer%d@example.com", i), Items: i, Total: float64(120 * i * i)})
	}
	poisonID := fmt.Sprintf("HC-%d", base+int64(cfg.Orders)+1)
	eventID := func(orderID string) string { return "evt-" + strings.ReplaceAll(orderID, "-", "") + "-01" }
	ours := map[string]bool{eventID(poisonID): true}
	for _, o := range orders {
		ours[eventID(o.OrderID)] = true
	}
	retryOnce := eventID(orders[1].OrderID) // sales-analytics fails it once

	st := &state{handled: map[string]map[string]int{}, repeats: map[string]int{}, shipped: map[string]int{}}
	for _, g := range Groups {
		st.handled[g] = map[string]int{}
	}

	// 2. The three groups. Each member handles the partitions it owns; an
	// inbox (seen event ids) catches a redelivery after a rebalance.
	handler := func(group, member string) consumer.Handler {
		return func(ctx context.Context, m *consumer.Message) error {
			id := m.Header.Get(nats.MsgIdHdr)
			var o Order
			if err := json.Unmarshal(m.Data, &o); err != nil {
				if ours[id] {
					p.say(group, "%s: cannot decode %s (%v): dead-letter it, other keys go on", member, id, err)
				}
				return consumer.DecodeError(fmt.Errorf("order %s: %w", id, err))
			}
			if !ours[id] {
				return nil // an event of an earlier run
			}
			st.mu.Lock()
			if _, dup := st.handled[group][id]; dup {
				st.repeats[group]++
				st.mu.Unlock()
				p.say(group, "%s: %s again (redelivery), caught by the inbox", member, id)
				return nil
			}
			st.mu.Unlock()
			switch group {
			case "email-notifier":
				p.say(group, "%s: partition %d fence %d: confirmation for %s sent to %s", member, m.Partition, m.Fence(), o.OrderID, o.Email)
			case "sales-analytics":
				if id == retryOnce && m.Attempt == 1 {
					p.say(group, "%s: %s: analytics warehouse timed out (transient): retried with backoff", member, o.OrderID)
					return errors.New("analytics warehouse: timeout")
				}
				st.mu.Lock()
				st.revenue += o.Total
				st.mu.Unlock()
				p.say(group, "%s: %s counted (%.2f, attempt %d)", member, o.OrderID, o.Total, m.Attempt)
			case "fraud-monitor":
				verdict := "ok"
				if o.Total > 2000 {
					verdict = "FLAGGED for review (total > 2000)"
					st.mu.Lock()
					st.flagged = append(st.flagged, o.OrderID)
					st.mu.Unlock()
				}
				p.say(group, "%s: %s %s", member, o.OrderID, verdict)
			}
			st.mu.Lock()
			st.handled[group][id] = m.Attempt
			st.mu.Unlock()
			return nil
		}
	}
	var members []*consumer.Member
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, m := range members {
			_ = m.Close(cctx)
		}
	}()
	for _, g := range Groups {
		n := 1
		if g == "email-notifier" {
			n = 2 // two members share the partitions
		}
		for i := 1; i <= n; i++ {
			id := fmt.Sprintf("%s-%d", strings.SplitN(g, "-", 2)[0], i)
			m, err := consumer.NewMember(js, consumer.MemberConfig{Group: g, ID: id}, handler(g, id))
			if err != nil {
				return err
			}
			if err := m.Start(ctx); err != nil {
				return fmt.Errorf("join %s: %w", g, err)
			}
			members = append(members, m)
			p.say(g, "member %s joined", id)
		}
	}

	// 3. A shipment worker that will crash holding its first job.
	crashConn, crashJS, err := connect("worker-a")
	if err != nil {
		return err
	}
	defer crashConn.Close()
	took := make(chan string, 1)
	crashy, err := consumer.NewWorkers(crashJS, consumer.WorkersConfig{Queue: DemoQueue, Concurrency: 1, NoDLQRouter: true},
		func(ctx context.Context, m *consumer.Message) error {
			select {
			case took <- string(m.Data):
			default:
			}
			<-ctx.Done() // the process dies before it finishes
			return ctx.Err()
		})
	if err != nil {
		return err
	}
	if err := crashy.Start(ctx); err != nil {
		return fmt.Errorf("start workers of %s: %w", DemoQueue, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = crashy.Close(cctx)
	}()

	// 4. Checkout.
	pub := platform.NewPublisher(js, platform.PublisherOptions{Retries: 2})
	publish := func(orderID string, payload []byte) (platform.PublishAck, error) {
		return pub.Publish(ctx, platform.Event{
			ID: eventID(orderID), Topic: Topic, Key: "order:" + orderID, Payload: payload,
			Headers: nats.Header{platform.HeaderTenant: []string{Tenant}},
		})
	}
	for _, o := range orders {
		b, _ := json.Marshal(o)
		ack, err := publish(o.OrderID, b)
		if err != nil {
			return fmt.Errorf("checkout: %w", err)
		}
		p.say("checkout", "order %s placed: event %s key order:%s -> %s seq %d", o.OrderID, eventID(o.OrderID), o.OrderID, ack.Stream, ack.Sequence)
	}
	b, _ := json.Marshal(orders[0])
	ack, err := publish(orders[0].OrderID, b)
	if err != nil {
		return fmt.Errorf("checkout: %w", err)
	}
	p.say("checkout", "order %s sent again (a retry after a timeout): duplicate=%v, stored once", orders[0].OrderID, ack.Duplicate)
	if _, err := publish(poisonID, []byte(`{"orderId":"`+poisonID+`","total":12`)); err != nil {
		return fmt.Errorf("checkout: %w", err)
	}
	p.say("checkout", "order %s placed with a truncated payload (poison)", poisonID)
	for _, o := range orders {
		job, _ := json.Marshal(map[string]string{"orderId": o.OrderID})
		if _, err := js.Publish(ctx, DemoQueue+"."+o.OrderID, job, jetstream.WithMsgID("ship-"+o.OrderID)); err != nil {
			return fmt.Errorf("enqueue shipment of %s: %w", o.OrderID, err)
		}
	}
	p.say("checkout", "%d shipment jobs queued on %s", len(orders), DemoQueue)

	// 5. The crash.
	var job struct {
		OrderID string `json:"orderId"`
	}
	select {
	case raw := <-took:
		_ = json.Unmarshal([]byte(raw), &job)
	case <-ctx.Done():
		return fmt.Errorf("no worker took a job: %w", ctx.Err())
	}
	crashConn.Close() // the process is gone: no ack, no lease renewal
	st.mu.Lock()
	st.crashJob, st.crashAt = job.OrderID, time.Now()
	st.mu.Unlock()
	p.say("worker-a", "took the shipment of %s and crashed without acking", job.OrderID)
	workers, err := consumer.NewWorkers(js, consumer.WorkersConfig{Queue: DemoQueue, Concurrency: 4},
		func(ctx context.Context, m *consumer.Message) error {
			var j struct {
				OrderID string `json:"orderId"`
			}
			if err := json.Unmarshal(m.Data, &j); err != nil {
				return consumer.DecodeError(err)
			}
			st.mu.Lock()
			defer st.mu.Unlock()
			if _, ok := st.shipped[j.OrderID]; ok {
				return nil // shipped already: the job's inbox
			}
			st.shipped[j.OrderID] = m.Attempt
			if j.OrderID == st.crashJob {
				st.backAt = time.Since(st.crashAt)
				p.say("worker-b", "shipped %s (attempt %d): back %.1fs after worker-a crashed, its lease (%s) lapsed", j.OrderID, m.Attempt, st.backAt.Seconds(), cfg.Lease)
			} else {
				p.say("worker-b", "shipped %s (attempt %d)", j.OrderID, m.Attempt)
			}
			return nil
		})
	if err != nil {
		return err
	}
	if err := workers.Start(ctx); err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = workers.Close(cctx)
	}()

	// 6. Wait for the outcome, then check it.
	var dead []dlq.Entry
	done := func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		for _, g := range Groups {
			if len(st.handled[g]) < len(orders) {
				return false
			}
		}
		if shippedOf(st, orders) < len(orders) {
			return false
		}
		es, err := dlq.Read(ctx, js, Topic)
		if err != nil {
			return false
		}
		dead = dead[:0]
		for _, e := range es {
			if e.Headers.Get("Platform-Event-Id") == eventID(poisonID) {
				dead = append(dead, e)
			}
		}
		return len(dead) >= len(Groups)
	}
	for !done() {
		select {
		case <-ctx.Done():
			p.say("harborcart", "gave up waiting: %v", ctx.Err())
			return report(p, st, orders, dead, cfg, eventID, retryOnce)
		case <-time.After(200 * time.Millisecond):
		}
	}
	for _, e := range dead {
		p.say("orders DLQ", "entry %d: group %s, class %s, attempts %d, %s seq %d, tenant %s: %s",
			e.Seq, e.Group, e.Class, e.Attempts, e.Stream, e.StreamSeq, e.Tenant, e.Reason)
	}
	time.Sleep(500 * time.Millisecond) // let a stray duplicate show up, if any
	return report(p, st, orders, dead, cfg, eventID, retryOnce)
}

func actionOf(c catalog.Change) string {
	if c.Action == "" {
		return "unchanged"
	}
	return string(c.Action)
}

// report prints every check and returns a *ChecksFailedError if one
// failed.
func report(p *printer, st *state, orders []Order, dead []dlq.Entry, cfg Config, eventID func(string) string, retryOnce string) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	var failed []string
	check := func(ok bool, format string, args ...any) {
		what := fmt.Sprintf(format, args...)
		mark := "ok"
		if !ok {
			mark = "FAILED"
			failed = append(failed, what)
		}
		p.say("check", "%-6s %s", mark, what)
	}
	for _, g := range Groups {
		check(len(st.handled[g]) == len(orders), "%s handled all %d orders (got %d)", g, len(orders), len(st.handled[g]))
	}
	check(st.handled["sales-analytics"][retryOnce] == 2, "sales-analytics retried its transient failure and succeeded on attempt 2 (got %d)", st.handled["sales-analytics"][retryOnce])
	groups := map[string]bool{}
	complete := true
	for _, e := range dead {
		groups[e.Group] = true
		complete = complete && e.Class == dlq.ClassDecode && e.Attempts == 1 && e.Reason != "" && e.Tenant == Tenant && len(e.Payload) > 0
	}
	check(len(dead) == len(Groups) && len(groups) == len(Groups) && complete,
		"the poison order is in the orders DLQ once per group (%d entries, groups %v), class decode after 1 attempt, with its reason, payload and tenant", len(dead), slices.Sorted(maps.Keys(groups)))
	check(shippedOf(st, orders) == len(orders), "every shipment job was shipped (%d of %d)", shippedOf(st, orders), len(orders))
	attempt := st.shipped[st.crashJob]
	check(st.crashJob != "" && attempt >= 2 && st.backAt >= cfg.Lease/2,
		"the crashed worker's job (%s) came back by lease: attempt %d, %.1fs after the crash (lease %s)", st.crashJob, attempt, st.backAt.Seconds(), cfg.Lease)
	p.say("summary", "revenue counted %.2f; flagged by fraud-monitor %v; repeats caught by inboxes %v", st.revenue, st.flagged, st.repeats)
	if len(failed) > 0 {
		return &ChecksFailedError{Failed: failed}
	}
	return nil
}

// shippedOf counts the orders of this run that were shipped.
func shippedOf(st *state, orders []Order) int {
	n := 0
	for _, o := range orders {
		if _, ok := st.shipped[o.OrderID]; ok {
			n++
		}
	}
	return n
}
