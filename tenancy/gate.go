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
// consumer or a stream deliver to the requester's reply subject passes
// the platform first.
//
// nats-server 2.15 does not check a pull request's reply subject (nor an
// ack's, nor a direct get's) against the requester's permissions, and
// delivers to it from inside the account: a delivery, even the empty
// error answer to a bad pull, landing on $JS.API.STREAM.DELETE.<s> deletes
// that stream; on a stored subject it copies events into a stream the
// requester cannot publish to; on $JS.ACK.<s>.<c>... it acks another
// group's event. So the tenant's account maps those request subjects,
// for every client (users and the platform's own connections alike;
// account mappings apply to what clients publish, never to the server's
// own deliveries), onto gate subjects:
//
//	$JS.API.CONSUMER.MSG.NEXT.> -> _PLATFORM.PULL.>  (pull requests)
//	$JS.ACK.>                   -> _PLATFORM.ACK.>   (acks, naks, +NXT, term, progress)
//	$JS.API.DIRECT.GET.>        -> _PLATFORM.DGET.>  (direct gets)
//
// nats-server checks a publish's permissions on the mapped subject, so a
// user is granted _PLATFORM.PULL.<stream>.<consumer> and
// _PLATFORM.ACK.<stream>.<consumer>.> for exactly the consumers it may
// read (acl.go), and never the JetStream subjects themselves. The gate,
// subscribed on every daemon's tenant runtime, forwards each request to
// APIPrefix (pulls, direct gets) or _PLATFORM.FWD.ACK (acks), which the
// account maps back onto the JetStream subjects (a mapping applies once,
// so these are not gated again), keeping its reply only when
// the reply is an inbox (under _INBOX, no wildcard): deliveries then land
// only in an inbox. A request with any other reply is dropped and
// audited (gate.refused). A user publishing to APIPrefix or
// _PLATFORM.FWD.ACK gains nothing: its permissions are checked on the
// JetStream subject it maps to. A server delivery to a gate, APIPrefix or
// forward subject is not mapped, so it reaches no consumer.
//
// A pull must reach its consumer after the requester's interest in the
// pull's reply inbox does: nats-server drops a waiting pull whose reply
// has no interest on the consumer leader's server, silently (the Fetch
// waits out its expiry). A client's SUB and its pull leave its server
// in that order on the one route to each peer, so a pull straight from
// the requester's server, or through a gate on the leader's server it
// reached on that route, is safe; a gate on a third server is not (its
// forward can overtake the interest on the direct route). So each node
// that runs in a daemon has a pull gate of its own, on a connection to
// that node, in a queue group named for the node: every node's gate gets
// each pull (one copy per node, sent on the route from the requester's
// server), and only the gate whose node leads the pull's consumer
// forwards it, from there. A manager with no nodes of its own (Config.Local
// empty) gates pulls on its ingest connection, as acks, with that race.
//
// The platform's own connections in a tenant's account speak JetStream
// through APIPrefix (jetstream.NewWithAPIPrefix): their requests, pulls
// included, reach JetStream straight from their own server, as before
// the gate (a pull through the gate right after its consumer was created
// could reach a server that had not yet learnt of the consumer, and be
// lost); their acks pass the gate.
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
func startGate(tenant, account string, fwd *wire.Conn, nodes []LocalNode, dial func(url string) (*wire.Conn, error), onAudit func(string)) (*gate, error) {
	g := &gate{tenant: tenant, account: account, fwd: fwd, onAudit: onAudit}
	fail := func(err error) (*gate, error) {
		g.close()
		return nil, err
	}
	for _, r := range gateRoutes {
		if r.kind == "PULL" && len(nodes) > 0 {
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
		err := retry.Do(context.Background(), retry.Policy{Initial: 50 * time.Millisecond, Max: 500 * time.Millisecond,
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
		if err := g.subscribe(conn, gateQueue(conn.ServerName()), gateRoutes[0], ng); err != nil {
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
