package region

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/embeddednats/natstest"

	"github.com/msgplatform/platform/platform"
)

// startGatedGuard starts the residency guard of rs with the gate on every
// in-process server of rr, recording each refusal.
func startGatedGuard(t *testing.T, rr *natstest.Regions, rs Regions) (*Guard, func() []Refusal) {
	t.Helper()
	var mu sync.Mutex
	var refusals []Refusal
	g, err := StartGuard(natstest.Context(t, 30*time.Second), rs, GuardOptions{
		OnRefusal: func(r Refusal) {
			mu.Lock()
			defer mu.Unlock()
			refusals = append(refusals, r)
		},
		Gate: &GateOptions{Account: rr.Trust().AdminAccount(), Servers: regionServers(rr.Regions), Interval: 200 * time.Millisecond},
	})
	if err != nil {
		t.Fatalf("start residency guard with gate: %v", err)
	}
	t.Cleanup(g.Stop)
	return g, func() []Refusal {
		mu.Lock()
		defer mu.Unlock()
		return append([]Refusal(nil), refusals...)
	}
}

// regionServers returns the running servers of a region of rr.
func regionServers(rr *embeddednats.Regions) func(string) []*server.Server {
	return func(region string) []*server.Server {
		f := rr.Region(region)
		if f == nil {
			return nil
		}
		var out []*server.Server
		for _, n := range f.Nodes() {
			if s := n.Server(); s != nil {
				out = append(out, s)
			}
		}
		return out
	}
}

// TestResidencyGateRefusesAtRequest tries every hand-made cross-border
// copy of the resident orders.eu in us, with the real nats CLI (the
// region's own API and --js-domain us; create and edit) and with nats.go
// (in us, and from eu through the link to domain us): each request gets
// the residency error, the stream never exists (no advisory, nothing for
// the guard to delete) or keeps its sources, each refusal is audited
// with remedy "refused". Legitimate streams (a plain one, a mirror of
// the non-resident topic, the platform's own mirror) are created as
// before.
func TestResidencyGateRefusesAtRequest(t *testing.T) {
	rr, rs := twoRegions(t, regionTopic("orders.eu", "eu"), regionTopic("orders", ""))
	ctx := natstest.Context(t, 120*time.Second)
	for range 5 {
		if _, err := rs[0].JS.Publish(ctx, "orders.eu.k", []byte("resident")); err != nil {
			t.Fatal(err)
		}
	}
	g, refusals := startGatedGuard(t, rr, rs)
	us := rs.byName("us")
	cli := natsCLI(t, rr, "us")
	fromEU := func(stream string) *jetstream.StreamSource {
		return &jetstream.StreamSource{Name: stream, External: &jetstream.ExternalStream{APIPrefix: "$JS.eu.API"}}
	}
	// A legitimate copy of the non-resident topic, edited below.
	legit := jetstream.StreamConfig{Name: "us_orders_copy", Sources: []*jetstream.StreamSource{fromEU("orders")}, Replicas: 1}
	if out, err := cli.runConfigOut(legit, nil, "stream", "add", legit.Name); err != nil {
		t.Fatalf("nats stream add of a legitimate copy of the non-resident topic: %v", err)
	} else {
		t.Logf("legitimate nats stream add: %s", firstLine(out))
	}
	usFromEU, err := jetstream.NewWithDomain(rr.Conn("eu"), "us")
	if err != nil {
		t.Fatal(err)
	}
	cliCreate := func(global []string, cfg jetstream.StreamConfig) func() error {
		return func() error {
			out, err := cli.runConfigOut(cfg, global, "stream", "add", cfg.Name)
			if err == nil {
				return nil
			}
			if !strings.Contains(out, "residency: stream "+cfg.Name) {
				t.Errorf("nats stream add %s: output does not carry the residency error: %s", cfg.Name, out)
			}
			return err
		}
	}
	type attempt struct {
		how    string
		stream string
		update bool
		do     func() error
	}
	attempts := []attempt{
		{"nats stream add --config (mirror of orders_eu, domain eu)", "gate_cli_mirror", false,
			cliCreate(nil, jetstream.StreamConfig{Name: "gate_cli_mirror", Mirror: fromEU("orders_eu")})},
		{"nats --js-domain us stream add --config (mirror of orders_eu)", "gate_cli_domain_mirror", false,
			cliCreate([]string{"--js-domain", "us"}, jetstream.StreamConfig{Name: "gate_cli_domain_mirror", Mirror: fromEU("orders_eu")})},
		{"nats stream add --config (sources orders and orders_eu)", "gate_cli_source", false,
			cliCreate(nil, jetstream.StreamConfig{Name: "gate_cli_source", Sources: []*jetstream.StreamSource{fromEU("orders"), fromEU("orders_eu")}})},
		{"nats stream add --config (mirror of the DLQ of orders.eu)", "gate_cli_dlq", false,
			cliCreate(nil, jetstream.StreamConfig{Name: "gate_cli_dlq", Mirror: fromEU(platform.DLQStream("orders.eu"))})},
		{"nats stream edit --config --force (adds source orders_eu)", legit.Name, true, func() error {
			edited := legit
			edited.Sources = append(append([]*jetstream.StreamSource(nil), legit.Sources...), fromEU("orders_eu"))
			out, err := cli.runConfigOut(edited, nil, "stream", "edit", legit.Name, "--force")
			if err != nil && !strings.Contains(out, "residency: stream "+legit.Name) {
				t.Errorf("nats stream edit: output does not carry the residency error: %s", out)
			}
			return err
		}},
		{"nats --js-domain us stream edit --config --force (adds source orders_eu)", legit.Name, true, func() error {
			edited := legit
			edited.Sources = append(append([]*jetstream.StreamSource(nil), legit.Sources...), fromEU("orders_eu"))
			out, err := cli.runConfigOut(edited, []string{"--js-domain", "us"}, "stream", "edit", legit.Name, "--force")
			if err != nil && !strings.Contains(out, "residency: stream "+legit.Name) {
				t.Errorf("nats --js-domain us stream edit: output does not carry the residency error: %s", out)
			}
			return err
		}},
		{"jetstream.CreateStream in us (mirror of orders_eu, domain eu)", "gate_api_mirror", false, apiCreate(ctx, us.JS,
			jetstream.StreamConfig{Name: "gate_api_mirror", Mirror: &jetstream.StreamSource{Name: "orders_eu", Domain: "eu"}})},
		{"jetstream.CreateStream from eu in domain us (mirror of orders_eu)", "gate_api_link_mirror", false, apiCreate(ctx, usFromEU,
			jetstream.StreamConfig{Name: "gate_api_link_mirror", Mirror: &jetstream.StreamSource{Name: "orders_eu", Domain: "eu"}})},
		{"jetstream.UpdateStream in us (adds source orders_eu)", legit.Name, true, func() error {
			edited := legit
			edited.Sources = append(append([]*jetstream.StreamSource(nil), legit.Sources...), &jetstream.StreamSource{Name: "orders_eu", Domain: "eu"})
			_, err := us.JS.UpdateStream(ctx, edited)
			return apiResidencyError(t, "UpdateStream", err)
		}},
	}

	succeeded := 0
	for _, a := range attempts {
		err := a.do()
		if err == nil {
			succeeded++
			t.Errorf("%s: accepted", a.how)
			continue
		}
		t.Logf("%s: refused: %s", a.how, errorLine(err.Error()))
		if a.update {
			s, err := us.JS.Stream(ctx, a.stream)
			if err != nil {
				t.Fatalf("%s: the legitimate stream is gone: %v", a.how, err)
			}
			if srcs := s.CachedInfo().Config.Sources; len(srcs) != 1 || srcs[0].Name != "orders" {
				succeeded++
				t.Errorf("%s: stream %s has %d sources after the refusal, want only orders", a.how, a.stream, len(srcs))
			}
		} else if _, err := us.JS.Stream(ctx, a.stream); !errors.Is(err, jetstream.ErrStreamNotFound) {
			succeeded++
			t.Errorf("%s: stream %s exists after the refusal (%v)", a.how, a.stream, err)
		}
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		if n := len(refusals()); n < len(attempts) {
			return fmt.Errorf("%d of %d refusals audited", n, len(attempts))
		}
		return nil
	})
	for _, ref := range refusals() {
		if ref.Remedy != "refused" || ref.Region != "us" || len(ref.Problems) == 0 || !strings.Contains(ref.Problems[0], "topic orders.eu is resident in eu") {
			t.Errorf("refusal %+v: want remedy refused in us naming topic orders.eu resident in eu", ref)
		}
	}
	audit, err := rs.Audit(ctx, "us")
	if err != nil {
		t.Fatalf("residency audit: %v", err)
	}
	refusedInAudit := 0
	for _, ref := range audit {
		if ref.Remedy == "refused" {
			refusedInAudit++
		}
	}
	if refusedInAudit != len(attempts) {
		t.Errorf("residency audit in us holds %d refusals at the request, want %d: %+v", refusedInAudit, len(attempts), audit)
	}
	if g.Refused() != g.RefusedAtRequest() {
		t.Errorf("the guard refused %d streams after the fact: the gate let them through", g.Refused()-g.RefusedAtRequest())
	}

	// Legitimate requests pass unchanged.
	out, err := cli.run(ctx, nil, "stream", "add", "gate_plain", "--subjects", "gate.plain.>", "--defaults")
	if err != nil {
		t.Fatalf("nats stream add of a plain stream: %v", err)
	}
	t.Logf("nats stream add gate_plain: %s", firstLine(out))
	s, err := us.JS.Stream(ctx, "gate_plain")
	if err != nil {
		t.Fatalf("plain stream: %v", err)
	}
	if subj := s.CachedInfo().Config.Subjects; len(subj) != 1 || subj[0] != "gate.plain.>" {
		t.Errorf("plain stream subjects %v", subj)
	}
	if _, err := cli.run(ctx, []string{"--js-domain", "us"}, "stream", "edit", "gate_plain", "--subjects", "gate.plain.>,gate.more.>", "--force"); err != nil {
		t.Errorf("nats --js-domain us stream edit of the plain stream: %v", err)
	}
	if _, err := cli.runConfigOut(jetstream.StreamConfig{Name: "gate_cli_legit_mirror", Mirror: fromEU("orders")}, nil, "stream", "add", "gate_cli_legit_mirror"); err != nil {
		t.Errorf("nats stream add of a mirror of the non-resident topic: %v", err)
	}
	if _, err := rs.Mirror(ctx, MirrorRequest{Topic: "orders", To: "us"}); err != nil {
		t.Fatalf("platform mirror of the non-resident topic: %v", err)
	}
	for _, name := range []string{"gate_plain", "gate_cli_legit_mirror", "orders", legit.Name} {
		if _, err := us.JS.Stream(ctx, name); err != nil {
			t.Errorf("legitimate stream %s in us: %v", name, err)
		}
	}
	if s, err := us.JS.Stream(ctx, "gate_plain"); err == nil && len(s.CachedInfo().Config.Subjects) != 2 {
		t.Errorf("plain stream subjects after edit: %v", s.CachedInfo().Config.Subjects)
	}
	rep, err := rs.Report(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Violations) != 0 {
		t.Errorf("residency report: %v", rep.Violations)
	}
	t.Logf("%d hand-made cross-border copies of resident orders.eu tried (6 with the nats CLI %s, 3 with nats.go): %d succeeded, %d refused at the request, %d deleted after the fact; audit records in us: %d",
		len(attempts), cli.bin, succeeded, g.RefusedAtRequest(), g.Refused()-g.RefusedAtRequest(), len(audit))
	if succeeded != 0 {
		t.Fatalf("%d of %d cross-border copies succeeded", succeeded, len(attempts))
	}
}

// apiCreate creates cfg with js and expects the gate's *jetstream.APIError.
func apiCreate(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) func() error {
	return func() error {
		_, err := js.CreateStream(ctx, cfg)
		var apiErr *jetstream.APIError
		if err != nil && (!errors.As(err, &apiErr) || apiErr.ErrorCode != GateErrCode || !strings.Contains(apiErr.Description, "residency: stream "+cfg.Name)) {
			return errors.New("not the gate's APIError: " + err.Error())
		}
		return err
	}
}

func apiResidencyError(t *testing.T, op string, err error) error {
	t.Helper()
	var apiErr *jetstream.APIError
	if err != nil && (!errors.As(err, &apiErr) || !strings.Contains(apiErr.Description, "residency:")) {
		t.Errorf("%s: want the gate's *jetstream.APIError, got %T %v", op, err, err)
	}
	return err
}

// TestResidencyGateReinstalls: an update of the platform account's JWT
// (which drops every mapping not in the JWT) and a restart of the region
// take the gate's mappings away; the gate puts them back and refuses
// again, and streams are still created in between.
func TestResidencyGateReinstalls(t *testing.T) {
	rr, rs := twoRegions(t, regionTopic("orders.eu", "eu"))
	ctx := natstest.Context(t, 120*time.Second)
	_, _ = startGatedGuard(t, rr, rs)
	us := rs.byName("us")
	rogue := jetstream.StreamConfig{Name: "gate_rogue", Mirror: &jetstream.StreamSource{Name: "orders_eu", Domain: "eu"}}
	usDomain, err := jetstream.NewWithDomain(rr.Conn("us"), "us")
	if err != nil {
		t.Fatal(err)
	}
	refusedNow := func(why string) {
		t.Helper()
		for _, js := range []jetstream.JetStream{us.JS, usDomain} {
			refusedBy(t, ctx, js, rogue, why)
		}
	}
	refusedNow("start")

	// A new JWT of the platform account (same claims, new issue time).
	trust := rr.Trust()
	ac, err := jwt.DecodeAccountClaims(trust.AdminAccountJWT)
	if err != nil {
		t.Fatal(err)
	}
	ac.IssuedAt = 0
	time.Sleep(1100 * time.Millisecond) // a new second: a different JWT
	opSK, err := trust.OperatorSigningKey()
	if err != nil {
		t.Fatal(err)
	}
	tok, err := ac.Encode(opSK)
	if err != nil {
		t.Fatal(err)
	}
	sys, err := embeddednats.ConnectSystem(trust, rr.Region("us").ClientURLs())
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Close()
	if _, err := sys.Request("$SYS.REQ.CLAIMS.UPDATE", []byte(tok), 5*time.Second); err != nil {
		t.Fatalf("push the platform account's JWT: %v", err)
	}
	natstest.WaitFor(t, 10*time.Second, func() error {
		for _, srv := range regionServers(rr.Regions)("us") {
			az, err := srv.Accountz(&server.AccountzOptions{Account: trust.AdminAccount()})
			if err != nil || az.Account == nil || az.Account.Jwt != tok {
				return errors.New("the platform account's new JWT is not applied yet")
			}
		}
		return nil
	})
	refusedNow("after a JWT update of the platform account")
	if _, err := us.JS.CreateStream(ctx, jetstream.StreamConfig{Name: "gate_after_update", Subjects: []string{"gate.after.>"}}); err != nil {
		t.Errorf("plain stream after the JWT update: %v", err)
	}

	rr.Kill("us")
	rr.Restart("us")
	refusedNow("after a restart of us")
	js, err := jetstream.NewWithDomain(rr.Conn("us", nats.Timeout(5*time.Second)), "us")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "gate_after_restart", Subjects: []string{"gate.restart.>"}}); err != nil {
		t.Errorf("plain stream after the restart (domain form): %v", err)
	}
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// errorLine is the line of s naming the error (the last, or the one
// holding "error").
func errorLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for _, l := range lines {
		if strings.Contains(l, "error") {
			return strings.TrimSpace(l)
		}
	}
	return lines[len(lines)-1]
}

// refusedBy waits until creating rogue with js is refused by the gate.
func refusedBy(t *testing.T, ctx context.Context, js jetstream.JetStream, rogue jetstream.StreamConfig, why string) {
	t.Helper()
	natstest.WaitFor(t, 10*time.Second, func() error {
		_, err := js.CreateStream(ctx, rogue)
		if err == nil {
			_ = js.DeleteStream(ctx, rogue.Name)
			return errors.New(why + ": created (the gate is not back yet)")
		}
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) || apiErr.ErrorCode != GateErrCode {
			return errors.New(why + ": " + err.Error())
		}
		return nil
	})
}
