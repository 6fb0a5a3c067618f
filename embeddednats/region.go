package embeddednats

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/msgplatform/platform/internal/validate"
)

// RegionsConfig is several regions run in one process (development and
// tests): one Fabric per region, each its own cluster and JetStream
// domain, linked by leafnodes in the platform account. The first region
// is the hub: it listens for leafnode links and every other region dials
// it.
type RegionsConfig struct {
	Fabrics []FabricConfig `mapstructure:"fabrics"`
	// LeafPort is the hub's first leafnode port; hub node i listens on
	// LeafPort+i (-1: free ports).
	LeafPort int `mapstructure:"leaf_port"`
	// Deny are subjects that never cross a link (the residency policy;
	// see platform/region.LinkDeny). The platform replaces it at run time with
	// SetDeny.
	Deny []string `mapstructure:"deny"`
}

// Validate reports every problem, keyed regions[i].<key>.
func (c *RegionsConfig) Validate() error {
	var p validate.Problems
	if len(c.Fabrics) < 2 {
		p.Addf("fabrics", "must list at least two regions, got %d", len(c.Fabrics))
	}
	seen := map[string]bool{}
	for i, r := range c.Fabrics {
		key := fmt.Sprintf("fabrics[%d]", i)
		p.Merge(key, r.Validate())
		r.Region.EnsureDefaults()
		if seen[r.Region.Domain] {
			p.Addf(key+".region.domain", "%q is used by another region: every region needs its own JetStream domain", r.Region.Domain)
		}
		seen[r.Region.Domain] = true
	}
	validatePort(&p, "leaf_port", c.LeafPort)
	return p.Err(ErrInvalidConfig)
}

// Regions is the running set of regions.
type Regions struct {
	cfg     RegionsConfig
	trust   *Trust
	fabrics []*Fabric
}

// NewRegions builds (but does not start) the regions of cfg.
func NewRegions(cfg RegionsConfig, trust *Trust) (*Regions, error) {
	for i := range cfg.Fabrics {
		cfg.Fabrics[i].EnsureDefaults()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Regions{cfg: cfg, trust: trust}
	var hubURLs []string
	for i, fc := range cfg.Fabrics {
		configs, err := fc.NodeConfigs()
		if err != nil {
			return nil, err
		}
		if i == 0 {
			lp, err := ports(fc.Host, cfg.LeafPort, fc.Nodes)
			if err != nil {
				return nil, err
			}
			for j := range configs {
				configs[j].Leaf.Host = fc.Host
				configs[j].Leaf.Port = lp[j]
			}
		}
		f, err := NewFabricNodes(fc, configs, trust)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			for _, n := range f.Nodes() {
				hubURLs = append(hubURLs, n.LeafURL())
			}
		} else {
			for _, n := range f.Nodes() {
				n.cfg.Leaf.Remotes = []LeafRemote{{URLs: hubURLs, Deny: append([]string(nil), cfg.Deny...)}}
			}
		}
		r.fabrics = append(r.fabrics, f)
	}
	return r, nil
}

// Start starts every region (the hub first) and waits until each is ready
// and every spoke node is linked to the hub.
func (r *Regions) Start(ctx context.Context) error {
	for _, f := range r.fabrics {
		if err := f.Start(ctx); err != nil {
			r.Close(context.Background())
			return err
		}
	}
	return r.WaitLinked(ctx)
}

// WaitLinked waits until every running node of every spoke region has a
// leafnode connection to the hub.
func (r *Regions) WaitLinked(ctx context.Context) error {
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		missing := ""
		for _, f := range r.fabrics[1:] {
			for _, n := range f.Nodes() {
				if n.Server() != nil && n.Linked() == 0 {
					missing = n.Name()
				}
			}
		}
		if missing == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %s has no link to region %s", ErrNotReady, missing, r.fabrics[0].Config().Region.Name)
		case <-tick.C:
		}
	}
}

// Names returns the region names, hub first.
func (r *Regions) Names() []string {
	out := make([]string, len(r.fabrics))
	for i, f := range r.fabrics {
		out[i] = f.Config().Region.Name
	}
	return out
}

// Region returns the fabric of region name, or nil.
func (r *Regions) Region(name string) *Fabric {
	for _, f := range r.fabrics {
		if f.Config().Region.Name == name {
			return f
		}
	}
	return nil
}

// Fabrics returns every region's fabric, hub first.
func (r *Regions) Fabrics() []*Fabric { return r.fabrics }

// Trust returns the installation's trust material.
func (r *Regions) Trust() *Trust { return r.trust }

// SetDeny replaces the subjects that never cross a link on every spoke
// node (where the links are dialled), then waits for the links to come
// back (see Node.SetLeafDeny).
func (r *Regions) SetDeny(ctx context.Context, deny []string) error {
	var errs []error
	for _, f := range r.fabrics[1:] {
		for _, n := range f.Nodes() {
			errs = append(errs, n.SetLeafDeny(deny))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return r.WaitLinked(ctx)
}

// Close stops every region, bounded by ctx.
func (r *Regions) Close(ctx context.Context) error {
	var errs []error
	for i := len(r.fabrics) - 1; i >= 0; i-- {
		errs = append(errs, r.fabrics[i].Close(ctx))
	}
	return errors.Join(errs...)
}
