package tenant

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/internal/bench"
	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/tenancy"
)

// quotaTarget is where the benchmark runs: a temporary fabric with a
// tenancy manager, or the platform at --server.
type quotaTarget interface {
	// tenant creates a tenant with topic orders and a user "producer"
	// that may publish to it, and returns the user's creds.
	tenant(ctx context.Context, name string, q tenancy.Quota, topic platform.TopicSpec) ([]byte, error)
	// applyRaw creates a platform (not tenant) topic.
	applyRaw(ctx context.Context, spec platform.TopicSpec) error
	admin() *nats.Conn
	// rawConn is the connection of the raw publish: like tenant C's, on
	// the first node of urls().
	rawConn() *nats.Conn
	// purge empties tenant's topic (best effort where the bench cannot
	// reach the tenant's account: a platform at --server).
	purge(ctx context.Context, tenant, topic string) error
	// arrange puts the raw topic's stream leader where tenant like's is
	// (like for like: the raw side and like's differ by the platform's
	// layer only) and describes where the tenants' streams and ingests
	// are. Best effort.
	arrange(ctx context.Context, rawStream string, tenants []string, like string) string
	urls() []string
	// connOptions are the options a tenant connection to urls() needs
	// (TLS of a platform at --server).
	connOptions() ([]nats.Option, error)
	// ingest reads tenant's ingest counters (in-process only; ok false
	// elsewhere).
	ingest(ctx context.Context, tenant string) (c ingestCounters, ok bool)
	close()
}

// ingestCounters are a tenant's ingest figures: what its connection
// received and the manager's counters.
type ingestCounters struct {
	in, out                                uint64 // the ingest connection's messages received and sent
	accepted, throttled, rejected, dropped uint64
}

func (c ingestCounters) since(o ingestCounters) string {
	return fmt.Sprintf("ingest connection received %d and sent %d; accepted %d, throttled %d, refused (429) %d, dropped %d",
		c.in-o.in, c.out-o.out, c.accepted-o.accepted, c.throttled-o.throttled, c.rejected-o.rejected, c.dropped-o.dropped)
}

// inProcessQuotaTarget is a temporary 3-node fabric with a tenancy
// manager: what platformd runs.
type inProcessQuotaTarget struct {
	dir string
	f   *embeddednats.Fabric
	nc  *nats.Conn
	raw *nats.Conn // admin, on the first node (where tenant C's publisher is)
	m   *tenancy.Manager
}

func newInProcessQuotaTarget(ctx context.Context, o QuotaOptions) (_ *inProcessQuotaTarget, err error) {
	t := &inProcessQuotaTarget{}
	defer func() {
		if err != nil {
			t.close()
		}
	}()
	if t.dir, err = os.MkdirTemp("", "platformctl-bench-quota-"); err != nil {
		return nil, err
	}
	trust, err := embeddednats.NewTrust()
	if err != nil {
		return nil, err
	}
	cfg := embeddednats.DefaultFabricConfig()
	cfg.Port, cfg.ClusterPort, cfg.DataDir = -1, -1, t.dir
	cfg.Durability.SyncAlways = o.SyncAlways
	cfg.LameDuck = 200 * time.Millisecond
	if t.f, err = bench.StartFabric(ctx, cfg, trust); err != nil {
		return nil, err
	}
	if t.nc, err = t.f.Connect(nats.MaxReconnects(-1)); err != nil {
		return nil, err
	}
	if t.raw, err = embeddednats.ConnectAdmin(trust, t.f.Nodes()[0].ClientURL(), nats.Name("platformctl-bench-raw")); err != nil {
		return nil, err
	}
	n := len(t.f.Nodes())
	if t.m, err = tenancy.NewManager(t.nc, trust, tenancy.Config{URL: t.f.ClientURLs(), Servers: n, Replicas: min(3, n), Local: tenancy.LocalNodes(t.f.Nodes())}); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err = t.m.Start(sctx); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *inProcessQuotaTarget) tenant(ctx context.Context, name string, q tenancy.Quota, topic platform.TopicSpec) ([]byte, error) {
	if _, err := t.m.Create(ctx, "platformctl-bench", tenancy.Spec{Name: name, Quota: q}); err != nil {
		return nil, err
	}
	if _, err := t.m.ApplyTopic(ctx, "platformctl-bench", name, topic, catalog.ApplyOptions{AllowReducedReplicas: true}); err != nil {
		return nil, err
	}
	uc, err := t.m.AddUser(ctx, "platformctl-bench", name, tenancy.UserSpec{Name: "producer", Pub: []string{topic.Name}})
	return uc.Creds, err
}

func (t *inProcessQuotaTarget) applyRaw(ctx context.Context, spec platform.TopicSpec) error {
	js, err := jetstream.New(t.nc)
	if err != nil {
		return err
	}
	_, err = catalog.NewReconciler(js, catalog.ReconcilerOptions{DefaultReplicas: 3}).ApplyTopic(ctx, spec, catalog.ApplyOptions{AllowReducedReplicas: true})
	return err
}

func (t *inProcessQuotaTarget) ingest(ctx context.Context, tenant string) (ingestCounters, bool) {
	in, out, ok := t.m.IngestCounts(tenant)
	if !ok {
		return ingestCounters{}, false
	}
	c := ingestCounters{in: in, out: out}
	uctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	us, err := t.m.Usage(uctx, tenant)
	if err != nil || len(us) != 1 {
		return c, true
	}
	c.accepted, c.throttled, c.rejected, c.dropped = us[0].MsgsIn, us[0].Throttled, us[0].Rejected, us[0].Dropped
	return c, true
}

func (t *inProcessQuotaTarget) admin() *nats.Conn { return t.nc }

func (t *inProcessQuotaTarget) purge(ctx context.Context, tenant, topic string) error {
	js, err := t.m.TenantJetStream(tenant)
	if err != nil {
		return err
	}
	s, err := js.Stream(ctx, tenancy.StreamName(topic))
	if err != nil {
		return err
	}
	return s.Purge(ctx)
}

func (t *inProcessQuotaTarget) rawConn() *nats.Conn { return t.raw }

// arrange moves the raw stream's leader to the server leading tenant
// like's stream and reports, per tenant, the server of its ingest and of
// its stream leader, and the raw stream's leader.
func (t *inProcessQuotaTarget) arrange(ctx context.Context, rawStream string, tenants []string, like string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	leaderOf := func(js jetstream.JetStream, stream string) string {
		s, err := js.Stream(ctx, stream)
		if err != nil || s.CachedInfo().Cluster == nil {
			return "?"
		}
		return s.CachedInfo().Cluster.Leader
	}
	var parts []string
	cLeader := ""
	for _, name := range tenants {
		js, err := t.m.TenantJetStream(name)
		if err != nil {
			parts = append(parts, name+": ?")
			continue
		}
		l := leaderOf(js, tenancy.StreamName("orders"))
		if name == like {
			cLeader = l
		}
		parts = append(parts, fmt.Sprintf("%s ingest on %s, stream leader %s", name, t.m.IngestServer(name), l))
	}
	js, err := jetstream.New(t.nc)
	if err != nil {
		return strings.Join(parts, "; ")
	}
	if cLeader != "" && cLeader != "?" && leaderOf(js, rawStream) != cLeader {
		body := fmt.Sprintf(`{"placement":{"preferred":%q}}`, cLeader)
		if _, err := t.nc.RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+rawStream, []byte(body)); err == nil {
			for ctx.Err() == nil && leaderOf(js, rawStream) != cLeader {
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	parts = append(parts, fmt.Sprintf("raw stream leader %s; the raw side and %s connect to %s", leaderOf(js, rawStream), like, t.raw.ConnectedServerName()))
	return strings.Join(parts, "; ")
}

func (t *inProcessQuotaTarget) urls() []string {
	var out []string
	for _, n := range t.f.Nodes() {
		out = append(out, n.ClientURL())
	}
	return out
}

func (t *inProcessQuotaTarget) connOptions() ([]nats.Option, error) { return nil, nil }

func (t *inProcessQuotaTarget) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if t.m != nil {
		_ = t.m.Close(ctx)
	}
	if t.nc != nil {
		t.nc.Close()
	}
	if t.raw != nil {
		t.raw.Close()
	}
	if t.f != nil {
		_ = t.f.Close(ctx)
	}
	if t.dir != "" {
		_ = os.RemoveAll(t.dir)
	}
}

// remoteQuotaTarget is the platform at --server, through its control
// API; the bench tenants are deleted (with their data) at the end.
type remoteQuotaTarget struct {
	remote  bench.Remote
	nc      *nats.Conn
	created []string
}

func newRemoteQuotaTarget(remote bench.Remote) (*remoteQuotaTarget, error) {
	nc, err := remote.Connect()
	if err != nil {
		return nil, err
	}
	return &remoteQuotaTarget{remote: remote, nc: nc}, nil
}

func (t *remoteQuotaTarget) tenant(ctx context.Context, name string, q tenancy.Quota, topic platform.TopicSpec) ([]byte, error) {
	call := func(subject string, req, resp any) error {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return control.Call(cctx, t.nc, subject, req, resp)
	}
	if err := call(tenancy.SubjTenantCreate, tenancy.CreateRequest{Actor: t.remote.Actor, Spec: tenancy.Spec{Name: name, Quota: q}}, nil); err != nil {
		return nil, fmt.Errorf("%w (a previous run left it? platformctl tenant delete %s --purge)", err, name)
	}
	t.created = append(t.created, name)
	if err := call(tenancy.SubjTenantTopic, tenancy.TopicRequest{Actor: t.remote.Actor, Tenant: name, Spec: topic,
		Options: catalog.ApplyOptions{AllowReducedReplicas: true}}, nil); err != nil {
		return nil, err
	}
	var uc tenancy.UserCreds
	err := call(tenancy.SubjUserAdd, tenancy.UserRequest{Actor: t.remote.Actor, Tenant: name, User: tenancy.UserSpec{Name: "producer", Pub: []string{topic.Name}}}, &uc)
	return uc.Creds, err
}

func (t *remoteQuotaTarget) applyRaw(ctx context.Context, spec platform.TopicSpec) error {
	return control.Call(ctx, t.nc, control.SubjTopicApply, control.ApplyTopicRequest{Spec: spec, Options: catalog.ApplyOptions{AllowReducedReplicas: true}}, nil)
}

func (t *remoteQuotaTarget) ingest(context.Context, string) (ingestCounters, bool) {
	return ingestCounters{}, false
}

func (t *remoteQuotaTarget) admin() *nats.Conn { return t.nc }

// purge: the admin connection cannot reach a tenant's account; the
// tenant's stream keeps what earlier runs stored.
func (t *remoteQuotaTarget) purge(context.Context, string, string) error { return nil }

func (t *remoteQuotaTarget) rawConn() *nats.Conn { return t.nc }

func (t *remoteQuotaTarget) arrange(context.Context, string, []string, string) string {
	return "remote platform: placement as it is"
}

func (t *remoteQuotaTarget) urls() []string { return t.remote.URLs }

func (t *remoteQuotaTarget) connOptions() ([]nats.Option, error) { return t.remote.ConnOptions() }

func (t *remoteQuotaTarget) close() {
	for _, name := range t.created {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = control.Call(ctx, t.nc, tenancy.SubjTenantDelete, tenancy.NameRequest{Actor: t.remote.Actor, Name: name, Purge: true}, nil)
		cancel()
	}
	t.nc.Close()
}
