package region

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/tick"
	"github.com/msgplatform/platform/platform"
)

// The residency gate: what refuses a cross-border mirror or source of a
// resident topic at the JetStream API request itself, so the requester
// gets an error and the stream never exists. The guard (region_guard.go)
// is the backstop for what the gate cannot see.
//
// The gate maps, in the platform account of every in-process server of a
// region, the stream create and update subjects (with and without a
// JetStream domain) onto $PLATFORM.GATE.<region>.STREAM.<op>.<stream>,
// served in a queue group. Guarantees:
//
//   - a request whose mirror or sources read data resident in another
//     region, that republishes resident data outside its resident subjects
//     (residencyViolations), or an update that drops or changes a stream's
//     declared residency (residencyKept) is answered with a JetStream API
//     error (code 400, err_code 10052, "residency: ..."), audited (Refusal,
//     Remedy "refused") and counted;
//   - any other request is forwarded unchanged on a forward subject whose
//     token derives from GateOptions.Secret, and the reply relayed;
//   - mappings lost (an account JWT update, a restarted node) are
//     reinstalled every GateOptions.Interval; meanwhile the guard checks;
//   - the gate fails open when a source's residency cannot be read.
// Design and reasoning: docs/design/residency.md.

// GateErrCode is the JetStream err_code of a residency refusal
// (JSStreamInvalidConfigF: the stream configuration is refused).
const GateErrCode = 10052

// GateOptions turn on the residency gate (GuardOptions.Gate).
type GateOptions struct {
	// Account is the account whose JetStream API the gate fronts: the
	// platform admin account's public key.
	Account string
	// Servers returns the in-process servers of region (a name of the
	// guard's regions) running now; the gate installs its mappings on
	// each. A region for which it returns none is not gated.
	Servers func(region string) []*server.Server
	// Secret derives the forward subject's token; every platformd of a
	// region must be given the same one (the installation's trust
	// material). Empty: a random token (every server of the region in
	// this process).
	Secret []byte
	// Interval between checks that every server has the mappings (0: 1s).
	Interval time.Duration
	// CheckTimeout bounds the residency check of one request (0: 2s).
	CheckTimeout time.Duration
	// ForwardTimeout bounds JetStream's answer to a forwarded request
	// (0: 30s), and BeforeResident.
	ForwardTimeout time.Duration
	// BeforeResident, if set, is called before a stream create or update
	// that will hold resident data (it declares a residency, or mirrors or
	// sources resident data in its region) is forwarded, with the link
	// deny list entries of that data (see ResidentDeny). It returns once
	// the region links deny them; an error refuses the request (the
	// stream is not created). Without it the link's deny list learns such
	// a stream from its advisory (ResidentLinkDeny), moments later.
	BeforeResident func(ctx context.Context, region string, entries []string) error
}

// GateLinkDeny belongs on every region link's deny list: the gate's
// forward subjects (and their interest) never cross, so no other region
// sees a forward token.
const GateLinkDeny = "$PLATFORM.GATE.*.FWD.>"

// gateQueue is the queue group of every gate of a region.
const gateQueue = "platform-residency-gate"

// gate is the residency gate of a Guard.
type gate struct {
	g       *Guard
	opts    GateOptions
	regions []*gateRegion
	stop    context.CancelFunc // ends keep
	done    chan struct{}

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// gateRegion is the gate of one region.
type gateRegion struct {
	r        *Region
	subject  string // $PLATFORM.GATE.<region>.STREAM.
	fwd      string // $PLATFORM.GATE.<region>.FWD.<token>.STREAM.
	mappings [][2]string
	// shadow is the server's own domain mapping our domain mappings must
	// precede ("" without a domain).
	shadow string
	sub    *nats.Subscription
}

// gateToken derives region's forward token from secret (random without
// one).
func gateToken(secret []byte, region string) (string, error) {
	if len(secret) == 0 {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			return "", err
		}
		return hex.EncodeToString(b), nil
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("msgplatform residency gate forward v1/" + region))
	return hex.EncodeToString(m.Sum(nil)[:16]), nil
}

// startGate subscribes the gate of every region with servers, then
// installs the mappings on them.
func startGate(g *Guard, rs Regions, opts GateOptions) (*gate, error) {
	if opts.Account == "" || opts.Servers == nil {
		return nil, fmt.Errorf("%w: residency gate needs Account and Servers", platform.ErrInvalidSpec)
	}
	if opts.Interval <= 0 {
		opts.Interval = time.Second
	}
	if opts.CheckTimeout <= 0 {
		opts.CheckTimeout = 2 * time.Second
	}
	if opts.ForwardTimeout <= 0 {
		opts.ForwardTimeout = 30 * time.Second
	}
	gt := &gate{g: g, opts: opts, done: make(chan struct{})}
	for i := range rs {
		r := &rs[i]
		if len(opts.Servers(r.Name)) == 0 {
			continue
		}
		tok, err := gateToken(opts.Secret, r.Name)
		if err != nil {
			gt.unsubscribe()
			return nil, fmt.Errorf("platform: residency gate: %w", err)
		}
		gr := &gateRegion{r: r, subject: "$PLATFORM.GATE." + r.Name + ".STREAM.", fwd: "$PLATFORM.GATE." + r.Name + ".FWD." + tok + ".STREAM."}
		gr.mappings = [][2]string{{gr.fwd + ">", "$JS.API.STREAM.>"}}
		prefixes := []string{"$JS.API."}
		if r.Domain != "" {
			prefixes = append(prefixes, "$JS."+r.Domain+".API.")
			gr.shadow = "$JS." + r.Domain + ".API.STREAM.>"
		}
		for _, p := range prefixes {
			for _, op := range []string{"CREATE", "UPDATE"} {
				gr.mappings = append(gr.mappings, [2]string{p + "STREAM." + op + ".*", gr.subject + op + ".{{wildcard(1)}}"})
			}
		}
		sub, err := r.JS.Conn().QueueSubscribe(gr.subject+"*.*", gateQueue, gt.onRequest(gr))
		if err != nil {
			gt.unsubscribe()
			return nil, fmt.Errorf("platform: residency gate: subscribe in %s: %w", r.Name, err)
		}
		gr.sub = sub
		gt.regions = append(gt.regions, gr)
		if err := r.JS.Conn().FlushTimeout(10 * time.Second); err != nil {
			gt.unsubscribe()
			return nil, fmt.Errorf("platform: residency gate in %s: %w", r.Name, err)
		}
	}
	// A server that cannot take the mappings now (not ready) gets them
	// from keep: a gate never stops its platformd from starting.
	if err := gt.install(); err != nil {
		g.log.Warn("residency gate: mappings not installed yet (retried; the guard remains the backstop)", "err", err)
	}
	ctx, stop := context.WithCancel(context.Background())
	gt.stop = stop
	go gt.keep(ctx)
	return gt, nil
}

// install puts the mappings on every server that lacks them.
func (gt *gate) install() error {
	var errs []error
	for _, gr := range gt.regions {
		for _, s := range gt.opts.Servers(gr.r.Name) {
			if err := gr.installOn(s, gt.opts.Account); err != nil {
				errs = append(errs, fmt.Errorf("platform: residency gate on %s (region %s): %w", s.Name(), gr.r.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// installOn adds the gate's mappings to the account on server s unless
// they are all there. The server's own domain mapping
// ($JS.<domain>.API.STREAM.>, which the first matching mapping would
// shadow ours with) is then moved behind them.
func (gr *gateRegion) installOn(s *server.Server, account string) error {
	acc, err := s.LookupAccount(account)
	if err != nil {
		return err
	}
	if gr.installed(s, account) {
		return nil
	}
	for _, m := range gr.mappings {
		if err := acc.AddMapping(m[0], m[1]); err != nil {
			return fmt.Errorf("mapping %s -> %s: %w", m[0], m[1], err)
		}
	}
	if gr.shadow != "" && acc.RemoveMapping(gr.shadow) {
		if err := acc.AddMapping(gr.shadow, "$JS.API.STREAM.>"); err != nil {
			return fmt.Errorf("mapping %s: %w", gr.shadow, err)
		}
	}
	return nil
}

// installed reports whether every mapping of the gate is on s.
func (gr *gateRegion) installed(s *server.Server, account string) bool {
	az, err := s.Accountz(&server.AccountzOptions{Account: account})
	if err != nil || az.Account == nil {
		return false
	}
	for _, m := range gr.mappings {
		if _, ok := az.Account.Mappings[m[0]]; !ok {
			return false
		}
	}
	return true
}

// keep installs the mappings again where they went missing (a restarted
// node, an update of the account's JWT) until ctx ends.
func (gt *gate) keep(ctx context.Context) {
	defer close(gt.done)
	tick.Repeat(ctx, gt.opts.Interval, nil, func(bool) bool {
		if err := gt.install(); err != nil {
			gt.g.log.Warn("residency gate: mappings not installed (the guard remains the backstop)", "err", err)
		}
		return true
	})
}

// uninstall removes the gate's mappings from every server: the request
// mappings (fwd false) or the forward mappings (fwd true).
func (gt *gate) uninstall(fwd bool) {
	for _, gr := range gt.regions {
		for _, s := range gt.opts.Servers(gr.r.Name) {
			acc, err := s.LookupAccount(gt.opts.Account)
			if err != nil {
				continue
			}
			for i, m := range gr.mappings {
				if (i == 0) == fwd {
					acc.RemoveMapping(m[0])
				}
			}
		}
	}
}

func (gt *gate) unsubscribe() {
	for _, gr := range gt.regions {
		if gr.sub != nil {
			_ = gr.sub.Unsubscribe()
		}
	}
}

// close hands JetStream's API back: stream creates go straight to it
// again, the requests in flight are answered, then the forward mappings
// go.
func (gt *gate) close() {
	gt.stop()
	<-gt.done
	gt.uninstall(false)
	gt.unsubscribe()
	gt.mu.Lock()
	gt.closed = true
	gt.mu.Unlock()
	gt.wg.Wait()
	gt.uninstall(true)
}

// onRequest serves each request in its own goroutine: a forwarded stream
// create waits for JetStream (the gate's own audit stream among them).
func (gt *gate) onRequest(gr *gateRegion) nats.MsgHandler {
	return func(m *nats.Msg) {
		gt.mu.Lock()
		if gt.closed {
			gt.mu.Unlock()
			return
		}
		gt.wg.Add(1)
		gt.mu.Unlock()
		go func() {
			defer gt.wg.Done()
			gt.serve(gr, m)
		}()
	}
}

// gateAPIError is the JetStream API error shape.
type gateAPIError struct {
	Code        int    `json:"code"`
	ErrCode     int    `json:"err_code"`
	Description string `json:"description"`
}

// serve checks one request and refuses or forwards it.
func (gt *gate) serve(gr *gateRegion, m *nats.Msg) {
	rest := strings.TrimPrefix(m.Subject, gr.subject)
	op, stream, ok := strings.Cut(rest, ".")
	if !ok || (op != "CREATE" && op != "UPDATE") {
		return
	}
	var cfg jetstream.StreamConfig
	parsed := json.Unmarshal(m.Data, &cfg) == nil
	if parsed && op == "UPDATE" {
		ctx, cancel := context.WithTimeout(context.Background(), gt.opts.CheckTimeout)
		p, err := residencyKept(ctx, gr.r, cfg)
		cancel()
		if err == nil && p != "" {
			gt.refuse(gr, m, op, stream, []sourceViolation{{Problem: p}})
			return
		}
	}
	if parsed && (cfg.Mirror != nil || len(cfg.Sources) > 0 || cfg.RePublish != nil || cfg.Metadata[platform.MetaResidency] != "") {
		ctx, cancel := context.WithTimeout(context.Background(), gt.opts.CheckTimeout)
		rs := gt.g.checkRegions(gr.r, cfg)
		vs, _, err := rs.residencyViolations(ctx, gr.r.Name, cfg)
		var entries []string
		if err == nil && len(vs) == 0 && gt.opts.BeforeResident != nil {
			entries, err = rs.residentEntriesOf(ctx, gr.r, cfg)
		}
		cancel()
		switch {
		case err != nil:
			gt.g.log.Warn("residency gate: check failed, request forwarded (the guard checks the stream)", "region", gr.r.Name, "stream", stream, "err", err)
		case len(vs) > 0:
			gt.refuse(gr, m, op, stream, vs)
			return
		case len(entries) > 0:
			// The stream will hold resident data: its API and subjects go
			// on the link's deny list before it exists.
			ctx, cancel := context.WithTimeout(context.Background(), gt.opts.ForwardTimeout)
			err := gt.opts.BeforeResident(ctx, gr.r.Name, entries)
			cancel()
			if err != nil {
				gt.refuseLink(gr, m, op, stream, err)
				return
			}
		}
	}
	gt.forward(gr, m, op, stream)
}

// refuse answers m with the residency error and audits the refusal.
func (gt *gate) refuse(gr *gateRegion, m *nats.Msg, op, stream string, vs []sourceViolation) {
	ref := Refusal{Region: gr.r.Name, Stream: stream, Action: strings.ToLower(op), Remedy: "refused", At: time.Now().UTC()}
	for _, v := range vs {
		ref.Problems = append(ref.Problems, v.Problem)
	}
	resp := struct {
		Type  string       `json:"type"`
		Error gateAPIError `json:"error"`
	}{
		Type: "io.nats.jetstream.api.v1.stream_" + strings.ToLower(op) + "_response",
		Error: gateAPIError{Code: 400, ErrCode: GateErrCode,
			Description: fmt.Sprintf("residency: stream %s refused in region %s: %s", stream, gr.r.Name, strings.Join(ref.Problems, "; "))},
	}
	if m.Reply != "" {
		b, _ := json.Marshal(resp)
		if err := m.Respond(b); err != nil {
			ref.Error = "reply not sent: " + err.Error()
		}
	}
	gt.g.refused.Add(1)
	gt.g.gated.Add(1)
	gt.g.enqueue(guardEvent{region: gr.r, stream: stream, action: ref.Action, refusal: &ref})
}

// refuseLink answers m with an error: the link deny list could not take
// the resident stream's entries first.
func (gt *gate) refuseLink(gr *gateRegion, m *nats.Msg, op, stream string, err error) {
	gt.g.log.Warn("residency gate: resident stream refused: the region link deny list could not be updated first", "region", gr.r.Name, "stream", stream, "err", err)
	if m.Reply == "" {
		return
	}
	resp := struct {
		Type  string       `json:"type"`
		Error gateAPIError `json:"error"`
	}{
		Type: "io.nats.jetstream.api.v1.stream_" + strings.ToLower(op) + "_response",
		Error: gateAPIError{Code: 503, ErrCode: GateErrCode,
			Description: fmt.Sprintf("residency: stream %s in region %s holds resident data and the region link could not deny it first (%v); retry", stream, gr.r.Name, err)},
	}
	b, _ := json.Marshal(resp)
	_ = m.Respond(b)
}

// forward passes m unchanged to JetStream's API and relays the reply.
func (gt *gate) forward(gr *gateRegion, m *nats.Msg, op, stream string) {
	fm := &nats.Msg{Subject: gr.fwd + op + "." + stream, Data: m.Data}
	if len(m.Header) > 0 {
		fm.Header = m.Header
	}
	resp, err := gr.r.JS.Conn().RequestMsg(fm, gt.opts.ForwardTimeout)
	if m.Reply == "" {
		return
	}
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			_ = m.RespondMsg(&nats.Msg{Header: nats.Header{"Status": []string{"503"}}})
			return
		}
		gt.g.log.Warn("residency gate: forwarded request not answered", "region", gr.r.Name, "stream", stream, "op", op, "err", err)
		return
	}
	out := &nats.Msg{Data: resp.Data}
	if len(resp.Header) > 0 {
		out.Header = resp.Header
	}
	if err := m.RespondMsg(out); err != nil {
		gt.g.log.Warn("residency gate: reply not relayed", "region", gr.r.Name, "stream", stream, "err", err)
	}
}
