package tenancy

import (
	"bytes"
	"sync/atomic"
	"time"

	"github.com/nats-io/jwt/v2"

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

// inboxReply reports whether reply is one the gate lets a delivery go to:
// a subject under _INBOX (a user's _INBOX_<user>. or a platform
// connection's _INBOX.) with no wildcard.
func inboxReply(reply []byte) bool {
	return bytes.HasPrefix(reply, inboxRoot) && !bytes.ContainsAny(reply, "*> \t")
}

var inboxRoot = []byte("_INBOX")

// gate forwards a tenant's gated requests on the runtime's wire
// connection.
type gate struct {
	tenant  string
	fwd     *wire.Conn
	onAudit func(detail string)
	refused atomic.Uint64
	last    atomic.Int64
	sids    []uint64
}

// startGate subscribes the gate subjects on fwd (queue group: each
// request is taken by one daemon).
func startGate(tenant string, fwd *wire.Conn, onAudit func(string)) (*gate, error) {
	g := &gate{tenant: tenant, fwd: fwd, onAudit: onAudit}
	for _, r := range gateRoutes {
		sub := gatePrefix + r.kind + "."
		fwdTo := r.fwd
		route := r
		sid, err := fwd.Subscribe(sub+">", ingestQueue, func(m *wire.Msg) {
			rest := m.Subject[len(sub):]
			reply := m.Reply
			if len(reply) > 0 && !inboxReply(reply) {
				g.refuse(route, m.Subject, reply)
				if !route.acks {
					return
				}
				reply = nil // an ack still counts; its answer goes nowhere
			}
			_ = fwd.Publish(fwdTo, rest, reply, m.Header, m.Data)
		})
		if err != nil {
			g.close()
			return nil, err
		}
		g.sids = append(g.sids, sid)
	}
	return g, fwd.Sync(2 * time.Second)
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

func (g *gate) close() {
	for _, sid := range g.sids {
		_ = g.fwd.Unsubscribe(sid)
	}
	g.sids = nil
}
