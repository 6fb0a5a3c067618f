package tenancy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgplatform/platform/internal/gather"
)

// TierUsage is JetStream use of one replica tier against its quota.
type TierUsage struct {
	Memory      uint64 `json:"memory"`
	Disk        uint64 `json:"disk"`
	Streams     int    `json:"streams"`
	Consumers   int    `json:"consumers"`
	MemoryQuota int64  `json:"memory_quota"`
	DiskQuota   int64  `json:"disk_quota"`
}

// Usage is what a tenant uses, cluster-wide: the publish counters are
// the sum over every daemon's manager (each counts what its ingest and
// its share of the auth error events saw since it started; see
// clusterStats), connections the sum over every node, messages out what
// the servers delivered to the tenant's own connections (open and
// closed; see watchDisconnects), storage the tenant's JetStream account
// info (for a suspended tenant, which no connection may enter, the
// servers' JSZ of its streams through the system account: its data is
// kept, and so is its place against the quota). Dropped counts
// fire-and-forget publishes lost to the rate quota (no reply subject to
// refuse them on, or the ingest's subscription overflowed).
type Usage struct {
	Tenant    string `json:"tenant"`
	State     State  `json:"state"`
	MsgsIn    uint64 `json:"msgs_in"`
	BytesIn   uint64 `json:"bytes_in"`
	MsgsOut   int64  `json:"msgs_out"`
	BytesOut  int64  `json:"bytes_out"`
	Throttled uint64 `json:"throttled"`
	Rejected  uint64 `json:"rejected"`
	Dropped   uint64 `json:"dropped"`
	// Refused counts events the store would have refused (a header over
	// 64 KiB, a message over the stream's or the account's maximum),
	// answered by the ingest with JetStream's own error; never accepted.
	Refused     uint64               `json:"refused"`
	Denied      uint64               `json:"auth_denied"`
	Connections int                  `json:"connections"`
	ConnQuota   int                  `json:"connections_quota"`
	PublishRate int                  `json:"publish_rate_quota"`
	Storage     map[string]TierUsage `json:"storage"`
	// Partial, when not empty, says which figures lack a part of the
	// cluster and why (a node down or slow to answer: its connections and
	// what it delivered to them are not counted; storage not read). The
	// publish counters are the managers' that answered (see
	// clusterStats).
	Partial string `json:"partial,omitempty"`
}

// Usage reports one tenant (name) or all (name "").
func (m *Manager) Usage(ctx context.Context, name string) ([]Usage, error) {
	var ts []Tenant
	if name != "" {
		t, err := m.Get(ctx, name)
		if err != nil {
			return nil, err
		}
		ts = []Tenant{t}
	} else {
		var err error
		if ts, err = m.List(ctx); err != nil {
			return nil, err
		}
	}
	var counts map[string]Counters
	var live map[string][2]int64
	var livePartial map[string]bool
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		counts = m.clusterStats(ctx)
	}()
	go func() {
		defer wg.Done()
		live, livePartial = m.liveDelivered(ctx, ts)
	}()
	stat, answered := m.accountStats(ctx, ts)
	wg.Wait()
	out := make([]Usage, 0, len(ts))
	for _, t := range ts {
		st := counts[t.Name]
		u := Usage{Tenant: t.Name, State: t.State, ConnQuota: t.Quota.Connections, PublishRate: t.Quota.PublishRate,
			MsgsIn: st.Accepted, BytesIn: st.AcceptedBytes, Throttled: st.Throttled,
			Rejected: st.Rejected, Dropped: st.Dropped, Refused: st.Refused, Denied: st.Denied, Storage: map[string]TierUsage{}}
		if s, ok := stat[t.Account]; ok {
			u.Connections = s.Conns
		}
		// Delivered to the tenant's own connections: closed (the
		// managers' counts) and open (see watchDisconnects).
		u.MsgsOut, u.BytesOut = int64(st.Out)+live[t.Name][0], int64(st.OutBytes)+live[t.Name][1]
		m.mu.Lock()
		rt := m.rts[t.Name]
		m.mu.Unlock()
		// Every daemon's manager keeps one platform connection per
		// running tenant (its ingest, leading or standing by), plus its
		// open service connections: the tenant's own are the rest.
		u.Connections = max(0, u.Connections-max(st.Platform, st.Runtimes))
		var gaps []string
		if answered < m.cfg.Servers {
			gaps = append(gaps, fmt.Sprintf("connections counted on %d of %d servers (the others did not answer)", answered, m.cfg.Servers))
		}
		if livePartial[t.Name] {
			gaps = append(gaps, fmt.Sprintf("messages out to open connections counted on fewer than %d servers", m.cfg.Servers))
		}
		quotas := map[string]Tier{"R1": t.Quota.Storage.R1, "R3": t.Quota.Storage.R3}
		if rt != nil {
			actx, cancel := context.WithTimeout(ctx, 2*time.Second)
			ai, err := rt.js.AccountInfo(actx)
			cancel()
			if err != nil {
				gaps = append(gaps, fmt.Sprintf("storage not read: %v", err))
			}
			if err == nil {
				for tier, q := range quotas {
					tu := TierUsage{MemoryQuota: q.Memory, DiskQuota: q.Disk}
					if ti, ok := ai.Tiers[tier]; ok {
						tu.Memory, tu.Disk, tu.Streams, tu.Consumers = ti.Memory, ti.Store, ti.Streams, ti.Consumers
					}
					u.Storage[tier] = tu
				}
			}
		} else {
			// No runtime here (the tenant is suspended: no connection
			// into its account is allowed): its streams are kept, so read
			// them through the system account.
			tiers, answered, err := m.storageFromServers(ctx, t.Account)
			switch {
			case err != nil:
				gaps = append(gaps, fmt.Sprintf("storage not read: %v", err))
			default:
				if answered < m.cfg.Servers {
					gaps = append(gaps, fmt.Sprintf("storage read from %d of %d servers (streams led by the others are not counted)", answered, m.cfg.Servers))
				}
				for tier, q := range quotas {
					tu := tiers[tier]
					tu.MemoryQuota, tu.DiskQuota = q.Memory, q.Disk
					u.Storage[tier] = tu
				}
			}
		}
		u.Partial = strings.Join(gaps, "; ")
		out = append(out, u)
	}
	return out, nil
}

// accountStats asks every server for the tenants' account statistics and
// sums them; answered is how many servers did (within 500 ms).
func (m *Manager) accountStats(ctx context.Context, ts []Tenant) (out map[string]*server.AccountStat, answered int) {
	out = map[string]*server.AccountStat{}
	if len(ts) == 0 {
		return out, m.cfg.Servers
	}
	if m.sys == nil {
		return out, 0
	}
	req := server.AccountStatzOptions{IncludeUnused: true}
	for _, t := range ts {
		req.Accounts = append(req.Accounts, t.Account)
	}
	body, _ := json.Marshal(req)
	answered, _ = gather.Collect(ctx, m.sys, "$SYS.REQ.ACCOUNT.PING.STATZ", body, gather.Options{Want: m.cfg.Servers, Wait: 500 * time.Millisecond}, func(msg *nats.Msg) (bool, error) {
		var r struct {
			Data *server.AccountStatz `json:"data"`
		}
		if json.Unmarshal(msg.Data, &r) != nil || r.Data == nil {
			return false, nil
		}
		for _, a := range r.Data.Accounts {
			s := out[a.Account]
			if s == nil {
				s = &server.AccountStat{Account: a.Account}
				out[a.Account] = s
			}
			s.Conns += a.Conns
			s.Sent.Msgs += a.Sent.Msgs - routed(a.Sent.Routes)
			s.Sent.Bytes += a.Sent.Bytes - routedBytes(a.Sent.Routes)
		}
		return true, nil
	})
	return out, answered
}

// jszFromServers asks every server for its JSZ of account (opts) and
// calls each with the detail of every server that answered within 500 ms
// and has the account loaded (one that has not answers with an error: it
// holds none of its streams). It returns how many servers answered.
func (m *Manager) jszFromServers(ctx context.Context, account string, opts server.JSzOptions, each func(*server.AccountDetail)) (int, error) {
	if m.sys == nil {
		return 0, errors.New("no system account connection")
	}
	body, _ := json.Marshal(opts)
	return gather.Collect(ctx, m.sys, fmt.Sprintf("$SYS.REQ.ACCOUNT.%s.JSZ", account), body, gather.Options{Want: m.cfg.Servers, Wait: 500 * time.Millisecond}, func(msg *nats.Msg) (bool, error) {
		var r struct {
			Data  *server.AccountDetail `json:"data"`
			Error *server.ApiError      `json:"error"`
		}
		if json.Unmarshal(msg.Data, &r) != nil || (r.Data == nil && r.Error == nil) {
			return false, nil
		}
		if r.Data != nil {
			each(r.Data)
		}
		return true, nil
	})
}

// storageFromServers sums account's JetStream use per replica tier from
// every server's JSZ for the account (each reports the streams it
// leads), as JetStream counts it against the tier's limits: a stream's
// bytes once per replica. For an account no connection may enter (a
// suspended tenant); answered is how many servers replied.
func (m *Manager) storageFromServers(ctx context.Context, account string) (tiers map[string]TierUsage, answered int, err error) {
	tiers = map[string]TierUsage{}
	seen := map[string]bool{}
	answered, err = m.jszFromServers(ctx, account, server.JSzOptions{Streams: true, Config: true, StreamLeaderOnly: true}, func(d *server.AccountDetail) {
		for _, sd := range d.Streams {
			if sd.Config == nil || seen[sd.Name] {
				continue
			}
			seen[sd.Name] = true
			replicas := max(sd.Config.Replicas, 1)
			tier := fmt.Sprintf("R%d", replicas)
			tu := tiers[tier]
			tu.Streams++
			tu.Consumers += sd.State.Consumers
			if sd.Config.Storage == server.MemoryStorage {
				tu.Memory += sd.State.Bytes * uint64(replicas)
			} else {
				tu.Disk += sd.State.Bytes * uint64(replicas)
			}
			tiers[tier] = tu
		}
	})
	if err != nil {
		return nil, 0, err
	}
	return tiers, answered, nil
}

// replicasOnServers counts the stream replicas of account that the
// servers answering hold (every replica, not the leaders only), and how
// many servers answered.
func (m *Manager) replicasOnServers(ctx context.Context, account string) (replicas, answered int, err error) {
	answered, err = m.jszFromServers(ctx, account, server.JSzOptions{Streams: true}, func(d *server.AccountDetail) {
		replicas += len(d.Streams)
	})
	return replicas, answered, err
}

func routed(m *server.MsgBytes) int64 {
	if m == nil {
		return 0
	}
	return m.Msgs
}

func routedBytes(m *server.MsgBytes) int64 {
	if m == nil {
		return 0
	}
	return m.Bytes
}

// Collector exports the usage of every tenant as Prometheus metrics
// labelled by tenant. The figures are cluster totals (see Usage): every
// daemon exports the same totals, so aggregate them with max by tenant,
// not sum.
func (m *Manager) Collector() prometheus.Collector { return &collector{m: m} }

type collector struct{ m *Manager }

var (
	descIn        = prometheus.NewDesc("platform_tenant_publish_events_total", "Events accepted by the ingest, by tenant.", []string{"tenant"}, nil)
	descInBytes   = prometheus.NewDesc("platform_tenant_publish_bytes_total", "Bytes (headers and payload, as stored) accepted by the ingest, by tenant.", []string{"tenant"}, nil)
	descRefused   = prometheus.NewDesc("platform_tenant_publish_refused_total", "Events the ingest refused because the store would (a header over 64 KiB, a message over the maximum size), by tenant; never counted as accepted.", []string{"tenant"}, nil)
	descThrottled = prometheus.NewDesc("platform_tenant_publish_throttled_total", "Events delayed by the publish-rate quota, by tenant.", []string{"tenant"}, nil)
	descRejected  = prometheus.NewDesc("platform_tenant_publish_rejected_total", "Events refused by the publish-rate quota with an error the publisher sees, by tenant.", []string{"tenant"}, nil)
	descDropped   = prometheus.NewDesc("platform_tenant_publish_dropped_total", "Fire-and-forget events (no reply subject) lost to the publish-rate quota, by tenant.", []string{"tenant"}, nil)
	descDenied    = prometheus.NewDesc("platform_tenant_auth_denied_total", "Connections of the tenant's users refused by the servers.", []string{"tenant"}, nil)
	descOut       = prometheus.NewDesc("platform_tenant_delivered_events", "Messages the servers delivered to the tenant's own connections (subscriptions, consumers, replies; not the platform's connections, streams or replication).", []string{"tenant"}, nil)
	descOutBytes  = prometheus.NewDesc("platform_tenant_delivered_bytes", "Bytes (headers and payload) of the messages in platform_tenant_delivered_events.", []string{"tenant"}, nil)
	descConns     = prometheus.NewDesc("platform_tenant_connections", "Live client connections of the tenant.", []string{"tenant"}, nil)
	descStorage   = prometheus.NewDesc("platform_tenant_storage_bytes", "JetStream storage used, by tenant, tier and kind.", []string{"tenant", "tier", "kind"}, nil)
	descQuota     = prometheus.NewDesc("platform_tenant_storage_quota_bytes", "JetStream storage quota, by tenant, tier and kind (-1 unlimited).", []string{"tenant", "tier", "kind"}, nil)
	descSuspended = prometheus.NewDesc("platform_tenant_suspended", "1 when the tenant is suspended.", []string{"tenant"}, nil)
	descPartial   = prometheus.NewDesc("platform_tenant_usage_partial", "1 when this scrape's usage figures of the tenant lack a part of the cluster (a node did not answer: its connections and deliveries are not counted; or storage was not read); platformctl usage says which.", []string{"tenant"}, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descIn, descInBytes, descThrottled, descRejected, descDropped, descRefused, descDenied, descOut, descOutBytes, descConns, descStorage, descQuota, descSuspended, descPartial} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	us, err := c.m.Usage(ctx, "")
	if err != nil {
		return
	}
	for _, u := range us {
		counter := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, u.Tenant)
		}
		counter(descIn, float64(u.MsgsIn))
		counter(descInBytes, float64(u.BytesIn))
		counter(descThrottled, float64(u.Throttled))
		counter(descRejected, float64(u.Rejected))
		counter(descDropped, float64(u.Dropped))
		counter(descRefused, float64(u.Refused))
		counter(descDenied, float64(u.Denied))
		// Gauges: a connection that just closed leaves the open
		// connections' sum a moment before its disconnect event is
		// counted.
		ch <- prometheus.MustNewConstMetric(descOut, prometheus.GaugeValue, float64(u.MsgsOut), u.Tenant)
		ch <- prometheus.MustNewConstMetric(descOutBytes, prometheus.GaugeValue, float64(u.BytesOut), u.Tenant)
		ch <- prometheus.MustNewConstMetric(descConns, prometheus.GaugeValue, float64(u.Connections), u.Tenant)
		susp := 0.0
		if u.State == StateSuspended {
			susp = 1
		}
		ch <- prometheus.MustNewConstMetric(descSuspended, prometheus.GaugeValue, susp, u.Tenant)
		partial := 0.0
		if u.Partial != "" {
			partial = 1
		}
		ch <- prometheus.MustNewConstMetric(descPartial, prometheus.GaugeValue, partial, u.Tenant)
		for tier, tu := range u.Storage {
			ch <- prometheus.MustNewConstMetric(descStorage, prometheus.GaugeValue, float64(tu.Memory), u.Tenant, tier, "memory")
			ch <- prometheus.MustNewConstMetric(descStorage, prometheus.GaugeValue, float64(tu.Disk), u.Tenant, tier, "disk")
			ch <- prometheus.MustNewConstMetric(descQuota, prometheus.GaugeValue, float64(tu.MemoryQuota), u.Tenant, tier, "memory")
			ch <- prometheus.MustNewConstMetric(descQuota, prometheus.GaugeValue, float64(tu.DiskQuota), u.Tenant, tier, "disk")
		}
	}
}

var _ prometheus.Collector = (*collector)(nil)

// String renders a usage line for logs.
func (u Usage) String() string {
	return fmt.Sprintf("%s in=%d out=%d conns=%d throttled=%d rejected=%d dropped=%d", u.Tenant, u.MsgsIn, u.MsgsOut, u.Connections, u.Throttled, u.Rejected, u.Dropped)
}
