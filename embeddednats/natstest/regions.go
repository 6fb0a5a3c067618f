package natstest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats"
)

// Regions is a running set of in-process regions for a test: each region
// its own cluster and JetStream domain (named like the region), the first
// the hub the others link to through leafnodes.
type Regions struct {
	*embeddednats.Regions
	t testing.TB
}

// RunRegions starts one cluster of nodes nodes per name (e.g. "eu", "us")
// linked by leafnodes, with deny as the link's initial deny list, and stops
// them when the test ends. Replicas default to min(3, nodes).
func RunRegions(t testing.TB, nodes int, deny []string, names ...string) *Regions {
	t.Helper()
	dir := t.TempDir()
	trust := Trust(t, dir)
	for attempt := 1; ; attempt++ {
		cfg := embeddednats.RegionsConfig{LeafPort: -1, Deny: deny}
		for _, name := range names {
			fc := embeddednats.DefaultFabricConfig()
			fc.Region = embeddednats.Region{Name: name}
			fc.Nodes = nodes
			fc.Port, fc.ClusterPort = -1, -1
			fc.DataDir = dir + "/" + name + "-" + string(rune('0'+attempt))
			fc.LameDuck = 300 * time.Millisecond
			fc.Durability.Replicas = min(3, nodes)
			cfg.Fabrics = append(cfg.Fabrics, fc)
		}
		r, err := embeddednats.NewRegions(cfg, trust)
		if err != nil {
			t.Fatalf("natstest: regions: %v", err)
		}
		if err = start(t, r, 60*time.Second); err == nil {
			return &Regions{Regions: r, t: t}
		}
		if !errors.Is(err, embeddednats.ErrPortInUse) || attempt == 3 {
			t.Fatalf("natstest: start regions: %v", err)
		}
		t.Logf("natstest: %v; retrying with other ports", err)
	}
}

// Conn returns an admin connection to region name's nodes, closed when the
// test ends.
func (r *Regions) Conn(name string, opts ...nats.Option) *nats.Conn {
	r.t.Helper()
	return r.fabric(name).Conn(opts...)
}

// JetStream returns a JetStream context of region name's own domain on a
// fresh admin connection to that region.
func (r *Regions) JetStream(name string) jetstream.JetStream {
	r.t.Helper()
	return r.fabric(name).JetStream()
}

// fabric is region name's fabric as a test Fabric for its connections;
// the test fails when there is no such region. Its routes have no proxies:
// Isolate, Heal and Delay do not apply.
func (r *Regions) fabric(name string) *Fabric {
	r.t.Helper()
	f := r.Region(name)
	if f == nil {
		r.t.Fatalf("natstest: no region %q", name)
	}
	return &Fabric{Fabric: f, t: r.t}
}

// Kill stops every node of region name at once (a region outage).
func (r *Regions) Kill(name string) {
	for _, n := range r.Region(name).Nodes() {
		n.Kill()
	}
}

// Restart starts every node of region name again (after Kill) and waits
// until the region is ready and every spoke is linked to the hub again.
func (r *Regions) Restart(name string) {
	r.t.Helper()
	f := r.Region(name)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, n := range f.Nodes() {
		if err := n.Launch(); err != nil {
			r.t.Fatalf("natstest: restart %s: %v", n.Name(), err)
		}
	}
	if err := f.WaitReady(ctx); err != nil {
		r.t.Fatalf("natstest: restart %s: %v", name, err)
	}
	if err := r.WaitLinked(ctx); err != nil {
		r.t.Fatalf("natstest: relink after restarting %s: %v", name, err)
	}
}
