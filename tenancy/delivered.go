package tenancy

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Messages out: what the servers delivered to a tenant's own connections.
//
// The servers' account statistics count every delivery in the account:
// to the platform's own connections (the ingest takes every event, the
// runtime its JetStream API replies), to the streams' internal
// subscriptions, and the replication between the nodes. A tenant that
// published 1,000 events and read none would show several thousand out.
// Usage's msgs_out counts the tenant's own connections only (users not
// signed by the account's signing key, as for the connection quota):
//
//   - live connections from the servers' connection lists (CONNZ of the
//     account, every node), their out_msgs and out_bytes;
//   - closed ones from the disconnect events, whose "received" figures
//     are the connection's final deliveries; each event is counted by one
//     manager (a queue group) and the managers' counts are summed like the
//     ingest's (see clusterStats), since each manager started.
//
// So a connection counts while it lives and after it closes, once.

// deliveredQueue is the queue group of the managers' disconnect event
// subscriptions.
const deliveredQueue = "platform-tenancy-delivered"

// watchDisconnects adds the final deliveries of each closed connection of
// a tenant user to the tenant's counters.
func (m *Manager) watchDisconnects() (*nats.Subscription, error) {
	return m.sys.QueueSubscribe("$SYS.ACCOUNT.*.DISCONNECT", deliveredQueue, func(msg *nats.Msg) {
		var ev server.DisconnectEventMsg
		if json.Unmarshal(msg.Data, &ev) != nil {
			return
		}
		tenant, own := m.ownConn(ev.Client.Account, ev.Client.IssuerKey)
		if !own {
			return
		}
		st := m.stats(tenant)
		st.Out.Add(uint64(max(0, ev.Received.Msgs)))
		st.OutBytes.Add(uint64(max(0, ev.Received.Bytes)))
	})
}

// ownConn names the tenant of account acc and says whether a connection
// whose user was signed by issuer is the tenant's own (see
// Tenant.platformIssued), from the index: events name only the account.
func (m *Manager) ownConn(acc, issuer string) (tenant string, own bool) {
	v, ok := m.keys.accounts.Load(acc)
	if !ok {
		return "", false
	}
	tenant = v.(string)
	if issuer == "" || issuer == acc {
		return tenant, false
	}
	if t, ok := m.keys.signers.Load(issuer); ok && t.(string) == tenant {
		return tenant, false
	}
	return tenant, true
}

// liveDelivered sums what the servers delivered to the tenants' own open
// connections, by tenant (a few CONNZ requests at a time). partial names
// the tenants whose sum lacks some server's connections (it did not
// answer in time, or the request failed).
func (m *Manager) liveDelivered(ctx context.Context, ts []Tenant) (out map[string][2]int64, partial map[string]bool) {
	out = make(map[string][2]int64, len(ts))
	partial = map[string]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i := range ts {
		t := &ts[i]
		if t.State != StateActive {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			conns, complete, err := m.accountConns(ctx, t)
			if err != nil || !complete {
				mu.Lock()
				partial[t.Name] = true
				mu.Unlock()
			}
			if err != nil {
				return
			}
			var sum [2]int64
			for _, c := range conns {
				if !t.platformIssued(c.issuer) {
					sum[0] += c.outMsgs
					sum[1] += c.outBytes
				}
			}
			mu.Lock()
			out[t.Name] = sum
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out, partial
}
