package tenancy

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"

	"github.com/msgplatform/platform/internal/retry"
	"github.com/msgplatform/platform/internal/wire"
)

// The gate: every JetStream request of a tenant's account that makes a
// consumer or a stream deliver to the requester's reply subject (pulls,
// acks, direct gets) passes the platform first. nats-server 2.15 checks
// none of those reply subjects against the requester's permissions, and a
// delivery to a JetStream API, stored or ack subject acts on it.
//
// So the tenant's account maps, for every client, onto gate subjects:
//
//	$JS.API.CONSUMER.MSG.NEXT.> -> _PLATFORM.PULL.>  (pull requests)
//	$JS.ACK.>                   -> _PLATFORM.ACK.>   (acks, naks, +NXT, term, progress)
//	$JS.API.DIRECT.GET.>        -> _PLATFORM.DGET.>  (direct gets)
//
// Guarantees: a user is granted the gate subjects of exactly the consumers
// it may read (acl.go), never the JetStream subjects; the gate forwards a
// request (on APIPrefix or _PLATFORM.FWD.ACK, mapped back once) only when
// its reply is an inbox (under _INBOX, no wildcard), and drops and audits
// any other (gate.refused). A pull is forwarded only by the gate of the
// node leading its consumer, so it never overtakes the requester's
// interest in its reply (nats-server drops a waiting pull whose reply has
// no interest); with no local nodes (Config.Local empty) that race stays.
// The platform's own connections send requests on APIPrefix, bypassing
// the gate; their acks pass it.
// Design and reasoning: docs/design/tenancy-gate.md.
const (
	gatePrefix = "_PLATFORM."
	fwdAck     = "_PLATFORM.FWD.ACK."
)

// APIPrefix is the JetStream API prefix of the platform's connections in
// a tenant's account: mapped onto $JS.API. there.
const APIPrefix = "_PLATFORM.API."

// gateRoute is one mapped JetStream request kind.
type gateRoute struct {
	js   string // the JetStream subject prefix, e.g. "$JS.ACK."
	kind string // its gate token, e.g. "ACK"
	fwd  string // where the gate forwards it (mapped back onto js)
	// acks: a reply is optional (a double ack asks for one); an invalid
	// one is dropped and the ack forwarded without it.
	acks bool
}

// gateRoutes lists the gated request kinds, pulls first.
var gateRoutes = []gateRoute{
	{js: "$JS.API.CONSUMER.MSG.NEXT.", kind: "PULL", fwd: APIPrefix + "CONSUMER.MSG.NEXT."},
	{js: "$JS.ACK.", kind: "ACK", fwd: fwdAck, acks: true},
	{js: "$JS.API.DIRECT.GET.", kind: "DGET", fwd: APIPrefix + "DIRECT.GET."},
}

// GateSubject is the subject a tenant user's permissions name for the
// JetStream subject js+rest (see gateRoutes); "" when js is not gated.
func GateSubject(js, rest string) string {
	for _, r := range gateRoutes {
		if r.js == js {
			return gatePrefix + r.kind + "." + rest
		}
	}
	return ""
}

// gateMappings are the account mappings of a tenant's account.
func gateMappings(ac *jwt.AccountClaims) {
	if ac.Mappings == nil {
		ac.Mappings = jwt.Mapping{}
	}
	for _, r := range gateRoutes {
		ac.Mappings[jwt.Subject(r.js+">")] = []jwt.WeightedMapping{{Subject: jwt.Subject(gatePrefix + r.kind + ".>")}}
	}
	ac.Mappings[jwt.Subject(APIPrefix+">")] = []jwt.WeightedMapping{{Subject: "$JS.API.>"}}
	ac.Mappings[jwt.Subject(fwdAck+">")] = []jwt.WeightedMapping{{Subject: "$JS.ACK.>"}}
}

// LocalNode is a server this manager's process runs (an embeddednats.Node):
// the tenants' pull gates connect to it and ask it which consumers it
// leads.
type LocalNode interface {
	ClientURL() string
	// Server is the running server, nil while it is down.
	Server() *server.Server
}

// LocalNodes lists nodes as Config.Local.
func LocalNodes[N LocalNode](nodes []N) []LocalNode {
	out := make([]LocalNode, len(nodes))
	for i, n := range nodes {
		out[i] = n
	}
	return out
}

// inboxReply reports whether reply is one the gate lets a delivery go to:
// a subject under _INBOX (a user's _INBOX_<user>. or a platform
// connection's _INBOX.) with no wildcard.
func inboxReply(reply []byte) bool {
	return bytes.HasPrefix(reply, inboxRoot) && !bytes.ContainsAny(reply, "*> \t")
}

var inboxRoot = []byte("_INBOX")

// gate forwards a tenant's gated requests.
type gate struct {
	tenant  string
	account string // the tenant's account public key
	fwd     *wire.Conn
	onAudit func(detail string)
	refused atomic.Uint64
	last    atomic.Int64
	sids    []uint64
	nodes   []*nodeGate
}

// nodeGate is the pull gate on one local node.
type nodeGate struct {
	conn *wire.Conn
	node LocalNode
}

// gateDialFor bounds the attempts to connect a node's pull gate.
const gateDialFor = 15 * time.Second

// gateQueue is the queue group of the pull gates on node server: each
// node's group takes one copy of every pull.
func gateQueue(server string) string { return "platform-gate-" + server }

// startGate subscribes the gate subjects: acks and direct gets on fwd
// (queue group: each request is taken by one daemon), and pulls on a
// connection dial opens to each of nodes (on fwd when there are none).
func startGate(ctx context.Context, tenant, account string, fwd *wire.Conn, nodes []LocalNode, dial func(url string) (*wire.Conn, error), onAudit func(string)) (*gate, error) {
	g := &gate{tenant: tenant, account: account, fwd: fwd, onAudit: onAudit}
	fail := func(err error) (*gate, error) {
		g.close()
		return nil, err
	}
	pull := gateRoutes[0] // the PULL route
	for _, r := range gateRoutes {
		if r.kind == pull.kind && len(nodes) > 0 {
			continue
		}
		if err := g.subscribe(fwd, ingestQueue, r, nil); err != nil {
			return fail(err)
		}
	}
	for _, n := range nodes {
		// A node that has not loaded a new tenant's account yet refuses
		// the connection for a moment.
		var conn *wire.Conn
		err := retry.Do(ctx, retry.Policy{Initial: 50 * time.Millisecond, Max: 500 * time.Millisecond,
			MaxElapsed: gateDialFor, Retryable: func(error) bool { return true }}, func(context.Context) error {
			var err error
			conn, err = dial(n.ClientURL())
			return err
		})
		if err != nil {
			return fail(fmt.Errorf("pull gate on %s: %w", n.ClientURL(), err))
		}
		ng := &nodeGate{conn: conn, node: n}
		g.nodes = append(g.nodes, ng)
		if err := g.subscribe(conn, gateQueue(conn.ServerName()), pull, ng); err != nil {
			return fail(err)
		}
	}
	if err := fwd.Sync(2 * time.Second); err != nil {
		return fail(err)
	}
	for _, ng := range g.nodes {
		if err := ng.conn.Sync(2 * time.Second); err != nil {
			return fail(err)
		}
	}
	return g, nil
}

// subscribe takes route r's requests on conn. With ng set (a node's pull
// gate), a request is forwarded only when ng's node leads its consumer.
func (g *gate) subscribe(conn *wire.Conn, queue string, r gateRoute, ng *nodeGate) error {
	sub := gatePrefix + r.kind + "."
	sid, err := conn.Subscribe(sub+">", queue, func(m *wire.Msg) {
		rest := m.Subject[len(sub):]
		if ng != nil && !ng.leads(g.account, rest) {
			return
		}
		reply := m.Reply
		if len(reply) > 0 && !inboxReply(reply) {
			g.refuse(r, m.Subject, reply)
			if !r.acks {
				return
			}
			reply = nil // an ack still counts; its answer goes nowhere
		}
		_ = conn.Publish(r.fwd, rest, reply, m.Header, m.Data)
	})
	if err != nil {
		return err
	}
	if ng == nil {
		g.sids = append(g.sids, sid)
	}
	return nil
}

// leads reports whether ng's node leads the consumer a pull subject's
// rest (<stream>.<consumer>) names: the node is clustered and the
// consumer's leader, or it is standalone.
func (ng *nodeGate) leads(account string, rest []byte) bool {
	s := ng.node.Server()
	if s == nil {
		return false
	}
	if !s.JetStreamIsClustered() {
		return true
	}
	stream, consumer, ok := bytes.Cut(rest, []byte("."))
	if !ok || len(stream) == 0 || len(consumer) == 0 || bytes.IndexByte(consumer, '.') >= 0 {
		return false
	}
	return s.JetStreamIsConsumerLeader(account, string(stream), string(consumer))
}

// refuse counts a request with a reply that is not an inbox, and audits
// it (one record per tenant per 10 s at most).
func (g *gate) refuse(r gateRoute, subject, reply []byte) {
	g.refused.Add(1)
	now := time.Now().UnixNano()
	last := g.last.Load()
	if now-last > int64(10*time.Second) && g.last.CompareAndSwap(last, now) && g.onAudit != nil {
		what := "forwarded without its reply"
		if !r.acks {
			what = "dropped"
		}
		g.onAudit("request " + r.js + string(subject[len(gatePrefix)+len(r.kind)+1:]) + " with reply " + string(reply) +
			" " + what + ": deliveries go only to an inbox (_INBOX...)")
	}
}

// close stops the gate; the node connections are closed with it.
func (g *gate) close() {
	for _, sid := range g.sids {
		_ = g.fwd.Unsubscribe(sid)
	}
	g.sids = nil
	for _, ng := range g.nodes {
		ng.conn.Close()
	}
	g.nodes = nil
}
