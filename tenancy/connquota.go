package tenancy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/msgplatform/platform/internal/gather"
)

// The connection quota, past the account's limit.
//
// A tenant account's connection limit is its quota plus the platform's
// reservation (connLimit), so the platform's own connections never take
// the tenant's slots. While one of them is down (a reconnect, a node
// restarting), the servers would let the tenant open that many more than
// its quota, and the platform's connection, coming back, would then be
// refused: an ingest locked out of its tenant. So every connect of a
// tenant account is followed (connQuotaDelay later, one manager per
// event: a queue group) by a count of the tenant's own connections
// across the cluster, those of users not signed by the account's signing
// key (platform users are; tenant users have scoped keys of their own),
// and the newest beyond the quota are closed, with a quota.hit record in
// the audit stream.

// connQuotaQueue is the queue group of the managers' connect event
// subscriptions.
const connQuotaQueue = "platform-tenancy-connquota"

// connQuotaDelay gathers a burst of connects into one count and lets the
// servers' cluster-wide connection counts settle.
const connQuotaDelay = 250 * time.Millisecond

// watchConnects checks the connection quota of a tenant after each
// connect to its account.
func (m *Manager) watchConnects() (*nats.Subscription, error) {
	var pending sync.Map // tenant -> struct{}: a check is scheduled
	return m.sys.QueueSubscribe("$SYS.ACCOUNT.*.CONNECT", connQuotaQueue, func(msg *nats.Msg) {
		var ev server.ConnectEventMsg
		if json.Unmarshal(msg.Data, &ev) != nil {
			return
		}
		tenant := m.tenantOfAccount(ev.Client.Account)
		if tenant == "" {
			return
		}
		if _, busy := pending.LoadOrStore(tenant, struct{}{}); busy {
			return
		}
		var check func(attempt int)
		check = func(attempt int) {
			if m.isClosed() {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			n, err := m.enforceConnQuota(ctx, tenant)
			switch {
			case errors.Is(err, errIncomplete) && attempt < connQuotaAttempts && !m.isClosed():
				// Not every server answered (a loaded or restarting
				// node) and those that did hold no more than the quota:
				// the others may hold the connection over it. Count
				// again.
				time.AfterFunc(time.Duration(attempt+1)*connQuotaDelay*4, func() { check(attempt + 1) })
				return
			case err != nil && !m.isClosed():
				m.log.Warn("tenancy: connection quota check", "tenant", tenant, "err", err)
			case n > 0:
				m.log.Warn("tenancy: closed connections over the connection quota", "tenant", tenant, "closed", n)
			}
		}
		time.AfterFunc(connQuotaDelay, func() {
			pending.Delete(tenant) // connects from now on schedule a count of their own
			check(0)
		})
	})
}

// connQuotaAttempts bounds the counts of one check that not every server
// answered.
const connQuotaAttempts = 5

func (m *Manager) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// tenantConn is one connection in a tenant's account.
type tenantConn struct {
	server string // the server's ID
	cid    uint64
	start  time.Time
	key    string // the user's public key
}

// enforceConnQuota closes the newest connections of tenant's users beyond
// its connection quota and returns how many it closed.
func (m *Manager) enforceConnQuota(ctx context.Context, tenant string) (int, error) {
	t, err := m.reg.get(ctx, tenant)
	if err != nil {
		return 0, err
	}
	if t.State != StateActive || t.Quota.Connections < 0 {
		return 0, nil
	}
	all, complete, err := m.accountConns(ctx, t)
	if err != nil {
		return 0, err
	}
	var own []tenantConn
	for _, c := range all {
		if !t.platformIssued(c.issuer) {
			own = append(own, c.tenantConn)
		}
	}
	over := len(own) - t.Quota.Connections
	if over <= 0 {
		if !complete { // a server that did not answer may hold more
			return 0, errIncomplete
		}
		return 0, nil
	}
	sort.Slice(own, func(i, j int) bool { // newest first
		if !own[i].start.Equal(own[j].start) {
			return own[i].start.After(own[j].start)
		}
		return own[i].cid > own[j].cid
	})
	closed := 0
	for _, c := range own[:over] {
		_, user := m.userOfKey(t.Account, c.key)
		body, _ := json.Marshal(server.KickClientReq{CID: c.cid})
		if _, err := m.sys.RequestWithContext(ctx, fmt.Sprintf("$SYS.REQ.SERVER.%s.KICK", c.server), body); err != nil {
			return closed, fmt.Errorf("close connection %d of user %s on server %s: %w", c.cid, user, c.server, err)
		}
		closed++
		m.auditAsync(Record{Actor: "platform-tenancy", Action: ActionQuotaHit, Tenant: tenant, Target: user,
			Detail: fmt.Sprintf("connection %d of user %s (%s) closed: the tenant had %d connections, over its quota of %d (a platform connection was reconnecting)",
				c.cid, user, c.key, len(own), t.Quota.Connections)})
	}
	return closed, nil
}

// issuedConn is a connection with the key that signed its user.
type issuedConn struct {
	tenantConn
	issuer            string
	outMsgs, outBytes int64 // what the server delivered to it
}

// errIncomplete: not every server listed its connections.
var errIncomplete = errors.New("not every server listed the account's connections within a second")

// accountConns lists the connections of t's account on every server that
// answers within a second; complete says all of them (Config.Servers)
// did.
func (m *Manager) accountConns(ctx context.Context, t *Tenant) (conns []issuedConn, complete bool, err error) {
	limit := t.Quota.Connections + m.cfg.PlatformConns + 1024
	body, _ := json.Marshal(server.ConnzEventOptions{ConnzOptions: server.ConnzOptions{Username: true, Limit: limit}})
	// Username asks for the auth details (user, issuer key); its JSON name
	// is "auth".
	var out []issuedConn
	replies, err := gather.Collect(ctx, m.sys, fmt.Sprintf("$SYS.REQ.ACCOUNT.%s.CONNZ", t.Account), body, gather.Options{Want: m.cfg.Servers, Wait: time.Second}, func(msg *nats.Msg) (bool, error) {
		var r struct {
			Server *server.ServerInfo `json:"server"`
			Data   *server.Connz      `json:"data"`
		}
		if json.Unmarshal(msg.Data, &r) != nil || r.Server == nil || r.Data == nil {
			return true, nil
		}
		for _, c := range r.Data.Conns {
			out = append(out, issuedConn{issuer: c.IssuerKey, outMsgs: c.OutMsgs, outBytes: c.OutBytes,
				tenantConn: tenantConn{server: r.Server.ID, cid: c.Cid, start: c.Start, key: c.AuthorizedUser}})
		}
		return true, nil
	})
	if err != nil {
		return nil, false, err
	}
	return out, replies >= m.cfg.Servers, nil
}
