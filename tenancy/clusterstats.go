package tenancy

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/msgplatform/platform/internal/gather"
)

// statsSubject (PLATFORM account) is where every manager answers with its
// tenants' counters, so any daemon reports cluster-wide totals.
const statsSubject = "platform.tenancy.stats"

// Counters are one manager's publish and denial counters of a tenant, or
// their sum over the cluster. Runtimes is how many managers run the
// tenant (each holds RuntimeConns platform connections in its account,
// and one pull gate connection per node it runs);
// Platform is every platform connection in the account (runtimes and
// service connections).
type Counters struct {
	Accepted      uint64 `json:"accepted"`
	AcceptedBytes uint64 `json:"accepted_bytes"`
	Throttled     uint64 `json:"throttled"`
	Rejected      uint64 `json:"rejected"`
	Dropped       uint64 `json:"dropped"`
	Refused       uint64 `json:"refused,omitempty"`
	Denied        uint64 `json:"denied"`
	Out           uint64 `json:"out,omitempty"`
	OutBytes      uint64 `json:"out_bytes,omitempty"`
	Runtimes      int    `json:"runtimes"`
	Platform      int    `json:"platform,omitempty"`
}

func (c *Counters) add(o Counters) {
	c.Accepted += o.Accepted
	c.AcceptedBytes += o.AcceptedBytes
	c.Throttled += o.Throttled
	c.Rejected += o.Rejected
	c.Dropped += o.Dropped
	c.Refused += o.Refused
	c.Denied += o.Denied
	c.Out += o.Out
	c.OutBytes += o.OutBytes
	c.Runtimes += o.Runtimes
	c.Platform += o.Platform
}

// localStats snapshots this manager's counters of every tenant.
func (m *Manager) localStats() map[string]Counters {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]Counters, len(m.counters))
	for name, s := range m.counters {
		c := Counters{Accepted: s.Accepted.Load(), AcceptedBytes: s.AcceptedBytes.Load(), Throttled: s.Throttled.Load(),
			Rejected: s.Rejected.Load(), Dropped: s.Dropped.Load(), Refused: s.Refused.Load(), Denied: s.Denied.Load(),
			Out: s.Out.Load(), OutBytes: s.OutBytes.Load()}
		if rt := m.rts[name]; rt != nil {
			c.Runtimes = 1
			c.Platform = rt.conns()
		}
		c.Platform += int(max(0, s.Service.Load()))
		out[name] = c
	}
	m.keys.violations.Range(func(k, v any) bool {
		c := out[k.(string)]
		c.Denied += v.(*atomic.Uint64).Load()
		out[k.(string)] = c
		return true
	})
	for name, rt := range m.rts {
		if _, ok := out[name]; !ok {
			out[name] = Counters{Runtimes: 1, Platform: rt.conns()}
		}
	}
	return out
}

type statsReply struct {
	Manager string              `json:"manager"`
	Tenants map[string]Counters `json:"tenants"`
}

// serveStats answers statsSubject with this manager's counters.
func (m *Manager) serveStats() (*nats.Subscription, error) {
	sub, err := m.nc.Subscribe(statsSubject, func(msg *nats.Msg) {
		b, err := json.Marshal(statsReply{Manager: m.lease.id, Tenants: m.localStats()})
		if err == nil {
			_ = msg.Respond(b)
		}
	})
	if err != nil {
		return nil, err
	}
	return sub, m.nc.Flush()
}

// statsQuiet and statsWait bound the gathering: it ends once no manager
// has answered for statsQuiet after the last reply, or after statsWait.
const (
	statsQuiet = 150 * time.Millisecond
	statsWait  = time.Second
)

// clusterStats asks every manager in the cluster (every daemon) for its
// counters and sums them per tenant. A manager that does not answer in
// time is missing from the sum; this manager's own counters are always
// included (read directly if its reply is not seen).
func (m *Manager) clusterStats(ctx context.Context) map[string]Counters {
	out := map[string]Counters{}
	seen := map[string]bool{}
	addReply := func(r statsReply) {
		if seen[r.Manager] {
			return
		}
		seen[r.Manager] = true
		for name, c := range r.Tenants {
			sum := out[name]
			sum.add(c)
			out[name] = sum
		}
	}
	defer func() {
		if !seen[m.lease.id] {
			addReply(statsReply{Manager: m.lease.id, Tenants: m.localStats()})
		}
	}()
	_, _ = gather.Collect(ctx, m.nc, statsSubject, nil, gather.Options{Wait: statsWait, Stall: statsQuiet}, func(msg *nats.Msg) (bool, error) {
		var r statsReply
		if json.Unmarshal(msg.Data, &r) == nil {
			addReply(r)
		}
		return true, nil
	})
	return out
}
