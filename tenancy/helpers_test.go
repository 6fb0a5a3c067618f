package tenancy_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/metrics/metricstest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/tenancy"
)

type env struct {
	t   *testing.T
	f   *natstest.Fabric
	m   *tenancy.Manager
	dir string
}

func start(t *testing.T, nodes int) *env {
	t.Helper()
	e := &env{t: t, f: natstest.RunFabric(t, nodes, natstest.WithSyncAlways(false)), dir: t.TempDir()}
	e.m = e.another()
	return e
}

// another starts a second manager on e's fabric (a second daemon in node
// mode), its configuration changed by changes, closed at the end of the
// test.
func (e *env) another(changes ...func(*tenancy.Config)) *tenancy.Manager {
	e.t.Helper()
	cfg := tenancy.Config{URL: e.f.ClientURLs(), Servers: len(e.f.Nodes()), Local: tenancy.LocalNodes(e.f.Nodes())}
	for _, change := range changes {
		change(&cfg)
	}
	m, err := tenancy.NewManager(e.f.Conn(), e.f.Trust(), cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	natstest.Start(e.t, m, 60*time.Second)
	return m
}

// tenantMetric is the value of m's metric name for tenant (a counter or a
// gauge) and the other labels given as name, value pairs (e.g. "tier",
// "R3"), -1 when it is not exported.
func tenantMetric(t *testing.T, m *tenancy.Manager, name, tenant string, labels ...string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collector())
	samples, err := metricstest.Samples(reg, name, append([]string{"tenant", tenant}, labels...)...)
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) == 0 {
		return -1
	}
	return samples[0].Value
}

// ctx is a context that ends after 60 s or with the test.
func ctx(t *testing.T) context.Context {
	return natstest.Context(t, 60*time.Second)
}

// tenant creates a tenant with topic orders (2 partitions), group
// email-notifier and queue shipment-jobs.
func (e *env) tenant(name string, q tenancy.Quota) {
	e.t.Helper()
	c := ctx(e.t)
	if _, err := e.m.Create(c, "test", tenancy.Spec{Name: name, Quota: q}); err != nil {
		e.t.Fatalf("create %s: %v", name, err)
	}
	orders := platform.DefaultTopicSpec("orders")
	orders.Partitions = 2
	if _, err := e.m.ApplyTopic(c, "test", name, orders, catalog.ApplyOptions{}); err != nil {
		e.t.Fatalf("topic: %v", err)
	}
	if _, err := e.m.ApplyQueue(c, "test", name, platform.DefaultQueueSpec("shipment-jobs"), catalog.ApplyOptions{}); err != nil {
		e.t.Fatalf("queue: %v", err)
	}
	if _, err := e.m.ApplyGroup(c, "test", name, platform.GroupSpec{Name: "email-notifier", Topic: "orders"}, catalog.ApplyOptions{}); err != nil {
		e.t.Fatalf("group: %v", err)
	}
}

// rateLimited creates tenant (as tenant) with the default quota but for
// a publish rate of rate events/s under policy, and its user producer
// who may publish to orders; it returns the producer's creds path.
func (e *env) rateLimited(tenant string, rate int, policy tenancy.Policy) string {
	e.t.Helper()
	e.tenant(tenant, rateQuota(rate, policy))
	return e.user(tenant, "producer", []string{"orders"}, nil)
}

// rateQuota is the default quota but for a publish rate of rate events/s
// under policy.
func rateQuota(rate int, policy tenancy.Policy) tenancy.Quota {
	q := tenancy.DefaultQuota()
	q.PublishRate, q.Policy = rate, policy
	return q
}

// user adds a user and writes its creds; returns the creds path.
func (e *env) user(tenant, name string, pub, sub []string) string {
	e.t.Helper()
	uc, err := e.m.AddUser(ctx(e.t), "test", tenant, tenancy.UserSpec{Name: name, Pub: pub, Sub: sub})
	if err != nil {
		e.t.Fatalf("user add %s/%s: %v", tenant, name, err)
	}
	p := filepath.Join(e.dir, tenant+"-"+name+".creds")
	if err := os.WriteFile(p, uc.Creds, 0o600); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// connect connects with creds to node i (or any node for -1).
func (e *env) connect(creds, user string, node int, opts ...nats.Option) (*nats.Conn, error) {
	url := e.f.ClientURLs()
	if node >= 0 {
		url = e.f.Node(node).ClientURL()
	}
	all := append([]nats.Option{nats.UserCredentials(creds), nats.CustomInboxPrefix(tenancy.InboxPrefix(user)),
		nats.NoReconnect(), nats.Timeout(3 * time.Second)}, opts...)
	return nats.Connect(url, all...)
}

func (e *env) mustConnect(creds, user string, node int, opts ...nats.Option) *nats.Conn {
	e.t.Helper()
	nc, err := e.connect(creds, user, node, opts...)
	if err != nil {
		e.t.Fatalf("connect %s: %v", user, err)
	}
	e.t.Cleanup(nc.Close)
	return nc
}

// jetStream connects with creds as mustConnect does and returns the
// connection's JetStream.
func (e *env) jetStream(creds, user string, node int, opts ...jetstream.JetStreamOpt) jetstream.JetStream {
	e.t.Helper()
	js, err := jetstream.New(e.mustConnect(creds, user, node), opts...)
	if err != nil {
		e.t.Fatalf("jetstream %s: %v", user, err)
	}
	return js
}

// flood publishes from one connection per node for d and counts acks and
// 429s.
func (e *env) flood(creds, user string, d time.Duration) (acked, limited int64) {
	var a, l atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	for i := range e.f.Nodes() {
		nc := e.mustConnect(creds, user, i)
		js, _ := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(256))
		wg.Add(1)
		go func() {
			defer wg.Done()
			var futs []jetstream.PubAckFuture
			for time.Now().Before(stop) {
				f, err := js.PublishAsync("orders.k", []byte("x"))
				if err != nil {
					continue
				}
				futs = append(futs, f)
			}
			for _, f := range futs {
				select {
				case <-f.Ok():
					a.Add(1)
				case err := <-f.Err():
					var apiErr *jetstream.APIError
					if errors.As(err, &apiErr) && apiErr.Code == 429 {
						l.Add(1)
					}
				case <-time.After(5 * time.Second):
				}
			}
		}()
	}
	wg.Wait()
	return a.Load(), l.Load()
}
