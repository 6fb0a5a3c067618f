package tenancy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/kvlease"
	"github.com/msgplatform/platform/internal/kvutil"
	"github.com/msgplatform/platform/internal/tick"

	"github.com/nats-io/nuid"
)

// LeaseBucket is the replicated KV bucket (PLATFORM account) holding one
// ingest lease per tenant, keyed by tenant name. Its holder is the only
// manager whose ingest subscribes to the tenant's publish subjects, so
// the tenant's rate quota holds in total however many daemons run.
const LeaseBucket = "platform-ingest-leases"

// leaseRecord is the value of a lease key. The expiry is not a
// timestamp (clocks differ between hosts): a standby takes a lease over
// when it has seen the same revision for longer than the TTL.
type leaseRecord struct {
	Holder string    `json:"holder"`
	Since  time.Time `json:"since"`
}

// leases runs the ingest election of one manager: every heartbeat it
// renews or tries to take each running tenant's lease (internal/kvlease:
// a standby takes a lease over when its revision has not moved for a
// TTL; the holder's ingest stops once it could not renew for TTL minus
// one heartbeat), and brings the tenants' runtimes in line with the
// registry (tenants created, changed, suspended or deleted through
// another daemon).
type leases struct {
	id       string
	ttl      time.Duration
	interval time.Duration

	mu sync.Mutex
	kv jetstream.KeyValue
	by map[string]*kvlease.Lease // tenant -> this manager's handle on its lease
}

func newLeases(ttl, interval time.Duration) *leases {
	return &leases{id: nuid.Next(), ttl: ttl, interval: interval, by: map[string]*kvlease.Lease{}}
}

func (m *Manager) leaseKV(ctx context.Context) (jetstream.KeyValue, error) {
	l := m.lease
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.kv != nil {
		return l.kv, nil
	}
	kv, err := kvutil.Open(ctx, m.js, jetstream.KeyValueConfig{
		Bucket:      LeaseBucket,
		Description: "platform ingest leases: one active ingest per tenant (tenancy)",
		History:     1,
		Replicas:    m.cfg.Replicas,
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("tenancy: lease bucket: %w", err)
	}
	l.kv = kv
	return kv, nil
}

// tryLead makes one attempt to hold or renew tenant's lease and reports
// whether this manager holds it afterwards.
func (m *Manager) tryLead(ctx context.Context, tenant string) (bool, error) {
	l := m.lease
	kv, err := m.leaseKV(ctx)
	if err != nil {
		return false, err
	}
	l.mu.Lock()
	ls := l.by[tenant]
	if ls == nil {
		ls = kvlease.New(kv, tenant, func() []byte {
			b, _ := json.Marshal(leaseRecord{Holder: l.id, Since: time.Now().UTC()})
			return b
		}, kvlease.Config{TTL: l.ttl, Valid: l.ttl - l.interval, Ours: func(v []byte) bool {
			var rec leaseRecord
			return json.Unmarshal(v, &rec) == nil && rec.Holder == l.id
		}})
		l.by[tenant] = ls
	}
	l.mu.Unlock()
	held := ls.Token() != 0
	tok, err := ls.Tick(ctx)
	if errors.Is(err, kvlease.ErrLost) { // someone took it over
		return false, nil
	}
	if tok != 0 && !held {
		m.log.Info("tenancy: ingest lease taken", "tenant", tenant, "holder", l.id)
	}
	return tok != 0, err
}

// release gives tenant's lease up (deletes it at the revision held), so a
// standby takes over at its next heartbeat instead of after the TTL.
func (m *Manager) release(ctx context.Context, tenant string) {
	l := m.lease
	l.mu.Lock()
	ls := l.by[tenant]
	delete(l.by, tenant)
	l.mu.Unlock()
	if ls != nil {
		ls.Release(ctx)
	}
}

// elect runs one election round for a running tenant and switches its
// ingest on or off. Callers hold m.mu.
func (m *Manager) elect(ctx context.Context, name string, rt *runtime) {
	lead, err := m.tryLead(ctx, name)
	if err != nil {
		m.log.Warn("tenancy: ingest lease", "tenant", name, "err", err)
	}
	if err := rt.in.setActive(lead); err != nil {
		m.log.Warn("tenancy: ingest", "tenant", name, "err", err)
	}
}

// heartbeat runs until the manager closes: every lease interval it syncs
// the runtimes with the registry and runs the election of each tenant.
func (m *Manager) heartbeat(done <-chan struct{}) {
	beating, stop := context.WithCancel(context.Background())
	go func() { <-done; stop() }()
	tick.Repeat(beating, m.lease.interval, nil, func(bool) bool {
		ctx, cancel := context.WithTimeout(context.Background(), m.lease.ttl)
		defer cancel()
		m.syncRound(ctx)
		return true
	})
}

// syncRound holds m.mu from reading the registry to the end, so a change
// made through this manager cannot fall between the read and the sync.
func (m *Manager) syncRound(ctx context.Context) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	ts, err := m.reg.list(ctx)
	if err != nil {
		m.log.Warn("tenancy: registry sync", "err", err)
		return
	}
	want := map[string]*Tenant{}
	for _, t := range ts {
		m.accounts[t.Account] = t.Name
		m.index(t)
		if t.State == StateActive {
			want[t.Name] = t
		}
	}
	for name := range m.rts {
		if want[name] == nil {
			m.stopRuntime(name)
		}
	}
	for name, t := range want {
		rt := m.rts[name]
		if rt == nil {
			if err := m.startRuntime(ctx, t); err != nil {
				m.log.Warn("tenancy: start tenant runtime", "tenant", name, "err", err)
			}
			continue
		}
		// Topics, queues and quota changed through another daemon.
		rt.in.setQuota(t.Quota)
		for topic := range t.Topics {
			_ = rt.in.subscribe(topic + ".*")
		}
		for q := range t.Queues {
			_ = rt.in.subscribe(q + ".>")
		}
		m.elect(ctx, name, rt)
	}
}
