package tenancy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nats-io/nuid"

	"github.com/msgplatform/platform/internal/jserr"
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
// renews the leases it holds (compare-and-set on the revision it wrote),
// takes over leases whose revision has not moved for a TTL, steps down
// from a lease it could not renew within the TTL, and brings the
// tenants' runtimes in line with the registry (tenants created, changed,
// suspended or deleted through another daemon).
type leases struct {
	id       string
	ttl      time.Duration
	interval time.Duration

	mu   sync.Mutex
	kv   jetstream.KeyValue
	held map[string]*held    // tenant -> lease this manager holds
	seen map[string]observed // tenant -> revision seen (standby)
}

type held struct {
	rev     uint64
	renewed time.Time // start of the last successful write
}

type observed struct {
	rev  uint64
	when time.Time
}

func newLeases(ttl, interval time.Duration) *leases {
	return &leases{id: nuid.Next(), ttl: ttl, interval: interval, held: map[string]*held{}, seen: map[string]observed{}}
}

func (m *Manager) leaseKV(ctx context.Context) (jetstream.KeyValue, error) {
	l := m.lease
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.kv != nil {
		return l.kv, nil
	}
	kv, err := m.js.KeyValue(ctx, LeaseBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = m.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      LeaseBucket,
			Description: "platform ingest leases: one active ingest per tenant (tenancy)",
			History:     1,
			Replicas:    m.cfg.Replicas,
			Storage:     jetstream.FileStorage,
		})
	}
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
	val, _ := json.Marshal(leaseRecord{Holder: l.id, Since: time.Now().UTC()})
	l.mu.Lock()
	h := l.held[tenant]
	l.mu.Unlock()
	start := time.Now()
	if h != nil { // renew what we hold
		rev, err := kv.Update(ctx, tenant, val, h.rev)
		if err != nil {
			if jserr.WrongRevision(err) { // someone took it over
				l.mu.Lock()
				delete(l.held, tenant)
				l.mu.Unlock()
				return false, nil
			}
			// Unknown outcome: keep leading only while the last renewal
			// is within the TTL, so a standby cannot lead at the same time.
			return time.Since(h.renewed) < l.ttl-l.interval, err
		}
		l.mu.Lock()
		h.rev, h.renewed = rev, start
		l.mu.Unlock()
		return true, nil
	}
	e, err := kv.Get(ctx, tenant)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		rev, err := kv.Create(ctx, tenant, val)
		if err != nil {
			if jserr.WrongRevision(err) {
				return false, nil
			}
			return false, err
		}
		return m.took(tenant, rev, start), nil
	case err != nil:
		return false, err
	}
	var rec leaseRecord
	_ = json.Unmarshal(e.Value(), &rec)
	l.mu.Lock()
	o, ok := l.seen[tenant]
	if !ok || o.rev != e.Revision() {
		l.seen[tenant] = observed{rev: e.Revision(), when: time.Now()}
	}
	l.mu.Unlock()
	// Ours from before a restart of this manager cannot happen (new id);
	// anyone else's is taken over once it has not moved for the TTL.
	if rec.Holder != l.id && (!ok || o.rev != e.Revision() || time.Since(o.when) < l.ttl) {
		return false, nil
	}
	rev, err := kv.Update(ctx, tenant, val, e.Revision())
	if err != nil {
		if jserr.WrongRevision(err) {
			return false, nil
		}
		return false, err
	}
	return m.took(tenant, rev, start), nil
}

func (m *Manager) took(tenant string, rev uint64, at time.Time) bool {
	l := m.lease
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held[tenant] = &held{rev: rev, renewed: at}
	delete(l.seen, tenant)
	m.log.Info("tenancy: ingest lease taken", "tenant", tenant, "holder", l.id)
	return true
}

// release gives tenant's lease up (deletes it at the revision held), so a
// standby takes over at its next heartbeat instead of after the TTL.
func (m *Manager) release(ctx context.Context, tenant string) {
	l := m.lease
	l.mu.Lock()
	h := l.held[tenant]
	delete(l.held, tenant)
	kv := l.kv
	l.mu.Unlock()
	if h == nil || kv == nil {
		return
	}
	_ = kv.Delete(ctx, tenant, jetstream.LastRevision(h.rev))
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
	t := time.NewTicker(m.lease.interval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), m.lease.ttl)
		m.syncRound(ctx)
		cancel()
	}
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
