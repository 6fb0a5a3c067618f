package embeddednats_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/attack"
	"github.com/msgplatform/platform/internal/tlsconf"
	"github.com/msgplatform/platform/internal/tlsconf/tlstest"
)

// secret is the payload an attacker must never see.
const secret = "tenant-payload-4111111111111111"

// publishSecrets publishes secret on subject every 50ms on nc until stop
// is closed, and returns how many were published when it ends.
func publishSecrets(t *testing.T, nc *nats.Conn, subject string, stop <-chan struct{}) <-chan int {
	t.Helper()
	out := make(chan int, 1)
	go func() {
		n := 0
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				_ = nc.Flush()
				out <- n
				return
			case <-tick.C:
				if nc.Publish(subject, []byte(secret)) == nil {
					n++
				}
			}
		}
	}()
	return out
}

// listening subscribes on nc to subject and counts what arrives, so a
// test knows its publishes were live (a legitimate subscriber gets them).
func listening(t *testing.T, nc *nats.Conn, subject string) func() int {
	t.Helper()
	ch := make(chan *nats.Msg, 1024)
	sub, err := nc.ChanSubscribe(subject, ch)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return func() int { return len(ch) }
}

// routeCount is every node's route count once it has stopped changing
// (a cluster just started may still be opening pooled routes).
func routeCount(t *testing.T, nodes []*embeddednats.Node) []int {
	t.Helper()
	read := func() []int {
		var out []int
		for _, n := range nodes {
			out = append(out, n.Server().NumRoutes())
		}
		return out
	}
	prev := read()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(300 * time.Millisecond)
		cur := read()
		if fmt.Sprint(cur) == fmt.Sprint(prev) {
			return cur
		}
		prev = cur
	}
	t.Fatalf("route counts never settled: %v", prev)
	return nil
}

func clusterAddr(n *embeddednats.Node) string {
	c := n.Config().Cluster
	return net.JoinHostPort(c.Host, strconv.Itoa(c.Port))
}

// TestAttackRouteRawDial: a process that dials a node's cluster port and
// speaks the route protocol without credentials (CONNECT, INFO, then
// interest in everything of the platform account) is refused, and none of
// the account's messages published meanwhile reach it.
func TestAttackRouteRawDial(t *testing.T) {
	f := natstest.RunFabric(t, 3)
	before := routeCount(t, f.Nodes())
	acc := f.Trust().AdminAccount()

	nc := f.Conn()
	count := listening(t, nc, "orders.>")
	stop := make(chan struct{})
	published := publishSecrets(t, nc, "orders.card", stop)
	time.Sleep(300 * time.Millisecond)

	conn, err := net.DialTimeout("tcp", clusterAddr(f.Node(0)), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	got := make(chan []byte, 1)
	go func() {
		var all bytes.Buffer
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = all.ReadFrom(bufio.NewReader(conn))
		got <- all.Bytes()
	}()
	fmt.Fprintf(conn, "CONNECT {\"verbose\":false,\"pedantic\":false,\"tls_required\":false,\"name\":\"ROGUE\",\"headers\":true,\"cluster\":\"test\"}\r\n")
	fmt.Fprintf(conn, "INFO {\"server_id\":\"ROGUEROUTE\",\"name\":\"rogue\",\"cluster\":\"test\",\"headers\":true}\r\n")
	fmt.Fprintf(conn, "PING\r\nRS+ %s >\r\nRS+ $SYS >\r\n", acc)
	var seen []byte
	select {
	case seen = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the server neither closed the rogue route nor let the read end")
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	n := <-published
	natstest.WaitFor(t, 5*time.Second, func() error {
		if count() < n {
			return fmt.Errorf("legitimate subscriber got %d of %d", count(), n)
		}
		return nil
	})
	if n == 0 {
		t.Fatal("nothing was published during the attack")
	}
	s := string(seen)
	if !strings.Contains(s, "Authorization Violation") {
		t.Errorf("rogue route was not refused for authorization; it read %q", s)
	}
	for _, leak := range []string{secret, "RS+", "RMSG", "LS+"} {
		if strings.Contains(s, leak) {
			t.Fatalf("rogue route received %q: %q", leak, s)
		}
	}
	if after := routeCount(t, f.Nodes()); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("routes changed from %v to %v", before, after)
	}
	t.Logf("published %d secrets during the attack, the rogue route read only %q", n, strings.TrimSpace(s))
	attack.Refused(t, "route_raw_dial")
}

// rogueServer starts a real nats-server that routes to target with the
// given route URL user (nil: none) and TLS, and has an account named acc
// whose user subscribes to everything: what an intruder who knows the
// account's public id would run to read it.
func rogueServer(t *testing.T, target string, user *url.Userinfo, tc *tls.Config, acc string) (*server.Server, func() int) {
	t.Helper()
	opts := &server.Options{}
	conf := fmt.Sprintf("accounts: { %s: { users: [{user: spy, password: spy}] } }\n", acc)
	if err := opts.ProcessConfigString(conf); err != nil {
		t.Fatal(err)
	}
	opts.ServerName = "rogue"
	opts.Host, opts.Port = "127.0.0.1", -1
	opts.Cluster.Name = "test"
	opts.Cluster.Host, opts.Cluster.Port = "127.0.0.1", -1
	opts.NoSigs, opts.NoLog = true, true
	if tc != nil {
		opts.Cluster.TLSConfig, opts.Cluster.TLSTimeout = tc, 2
	}
	u := &url.URL{Scheme: "nats-route", Host: target, User: user}
	opts.Routes = []*url.URL{u}
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("rogue server not ready")
	}
	t.Cleanup(s.Shutdown)
	spy, err := nats.Connect(s.ClientURL(), nats.UserInfo("spy", "spy"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(spy.Close)
	ch := make(chan *nats.Msg, 1024)
	if _, err := spy.ChanSubscribe(">", ch); err != nil {
		t.Fatal(err)
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	return s, func() int {
		n := 0
		for len(ch) > 0 {
			m := <-ch
			if string(m.Data) == secret {
				n++
			}
		}
		return n
	}
}

// rogueRun publishes secrets on f's platform account for a while and
// reports how many the legitimate subscriber and the spy got, and whether
// any node of f ever had more routes than before (it accepted the rogue).
// The rogue's own count is no evidence: a dialling server registers the
// route when the node's INFO arrives, before the node refuses its CONNECT.
func rogueRun(t *testing.T, f *natstest.Fabric, before []int, spied func() int) (published, legit, spy int, routed bool) {
	t.Helper()
	nc := f.Conn()
	count := listening(t, nc, "orders.>")
	stop := make(chan struct{})
	pub := publishSecrets(t, nc, "orders.card", stop)
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		for i, n := range f.Nodes() {
			if s := n.Server(); s != nil && i < len(before) && s.NumRoutes() > before[i] {
				routed = true
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	published = <-pub
	time.Sleep(200 * time.Millisecond) // deliveries in flight
	return published, count(), spied(), routed
}

// TestAttackRouteRogueServer: a real nats-server configured with a route
// to the cluster port but without the route credentials is refused, and
// its subscriber in an account of the same name receives none of the
// messages published meanwhile. The same server given the credentials
// does receive them: the check sees a leak when there is one.
func TestAttackRouteRogueServer(t *testing.T) {
	f := natstest.RunFabric(t, 3)
	before := routeCount(t, f.Nodes())
	acc := f.Trust().AdminAccount()
	target := clusterAddr(f.Node(0))

	for _, bad := range []struct {
		name string
		user *url.Userinfo
	}{{"none", nil}, {"guessed", url.UserPassword("platform-route", "guess")}} {
		rogue, spied := rogueServer(t, target, bad.user, nil, acc)
		published, legit, spy, routed := rogueRun(t, f, before, spied)
		if published == 0 || legit < published {
			t.Fatalf("credentials %s: published %d, the legitimate subscriber got %d", bad.name, published, legit)
		}
		if routed || spy > 0 {
			t.Fatalf("credentials %s: rogue server routed=%v and read %d of %d secrets", bad.name, routed, spy, published)
		}
		if after := routeCount(t, f.Nodes()); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("credentials %s: routes changed from %v to %v", bad.name, before, after)
		}
		rogue.Shutdown()
		t.Logf("credentials %s: %d secrets published, the rogue server read none", bad.name, published)
	}

	user, pass, err := f.Trust().RouteCredentials()
	if err != nil {
		t.Fatal(err)
	}
	rogue, spied := rogueServer(t, target, url.UserPassword(user, pass), nil, acc)
	natstest.WaitFor(t, 10*time.Second, func() error {
		if rogue.NumRoutes() == 0 {
			return fmt.Errorf("the server with the route credentials has no route")
		}
		return nil
	})
	time.Sleep(500 * time.Millisecond) // its interest reaches every node
	published, _, spy, _ := rogueRun(t, f, before, spied)
	if spy == 0 {
		t.Fatalf("control: a server holding the route credentials read 0 of %d secrets; the check above proves nothing", published)
	}
	t.Logf("control: with the route credentials the server read %d of %d", spy, published)
	attack.Refused(t, "route_rogue_server")
}

// tlsRouteFabric starts a 3-node cluster whose routes use TLS with
// verify (mTLS), certificates of ca.
func tlsRouteFabric(t *testing.T, ca *tlstest.CA) *embeddednats.Fabric {
	t.Helper()
	cfg := embeddednats.DefaultFabricConfig()
	cfg.Port, cfg.ClusterPort = -1, -1
	cfg.DataDir = t.TempDir()
	cfg.Region = embeddednats.Region{Name: "test"}
	cfg.LameDuck = 200 * time.Millisecond
	cfg.EnsureDefaults()
	trust := natstest.Trust(t, cfg.DataDir)
	configs, err := cfg.NodeConfigs()
	if err != nil {
		t.Fatal(err)
	}
	for i := range configs {
		configs[i].Cluster.TLS = ca.ServerT(t, configs[i].Name)
		configs[i].Cluster.TLS.Verify = true
	}
	f, err := embeddednats.NewFabricNodes(cfg, configs, trust)
	if err != nil {
		t.Fatal(err)
	}
	natstest.Start(t, f, 60*time.Second)
	return f
}

// TestAttackRouteForeignCA: with node.cluster.tls.verify, a route that
// holds the route credentials but presents a certificate of another CA
// is refused in the TLS handshake and reads nothing; the cluster itself
// forms over mTLS and elects a meta leader.
func TestAttackRouteForeignCA(t *testing.T) {
	ca := tlstest.NewT(t)
	f := tlsRouteFabric(t, ca)
	for _, n := range f.Nodes() {
		if got := n.Server().NumRoutes(); got < 2 {
			t.Fatalf("%s has %d routes over mTLS, want 2", n.Name(), got)
		}
	}
	before := routeCount(t, f.Nodes())
	user, pass, err := f.Trust().RouteCredentials()
	if err != nil {
		t.Fatal(err)
	}
	other := tlstest.NewT(t)
	foreign, err := other.ServerT(t, "rogue").Peer()
	if err != nil {
		t.Fatal(err)
	}
	foreign.InsecureSkipVerify = true // the intruder trusts anything
	noCert := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}
	for _, bad := range []struct {
		name string
		tc   *tls.Config
	}{{"foreign_ca", foreign}, {"no_cert", noCert}, {"plaintext", nil}} {
		rogue, spied := rogueServer(t, clusterAddr(f.Node(0)), url.UserPassword(user, pass), bad.tc, f.Trust().AdminAccount())
		nc, err := f.Node(1).Connect()
		if err != nil {
			t.Fatal(err)
		}
		count := listening(t, nc, "orders.>")
		stop := make(chan struct{})
		pub := publishSecrets(t, nc, "orders.card", stop)
		routed := false
		for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			for i, n := range f.Nodes() { // the cluster's count: see rogueRun
				routed = routed || n.Server().NumRoutes() > before[i]
			}
		}
		close(stop)
		published := <-pub
		time.Sleep(200 * time.Millisecond)
		spy := spied()
		if published == 0 || count() < published {
			t.Fatalf("%s: published %d, legitimate subscriber got %d", bad.name, published, count())
		}
		if routed || spy > 0 {
			t.Fatalf("%s: rogue route routed=%v, read %d of %d secrets", bad.name, routed, spy, published)
		}
		for i, n := range f.Nodes() {
			if got := n.Server().NumRoutes(); got != before[i] {
				t.Fatalf("%s: %s routes %d, was %d", bad.name, n.Name(), got, before[i])
			}
		}
		nc.Close()
		rogue.Shutdown()
		t.Logf("%s: refused, %d secrets published, none read", bad.name, published)
	}
	attack.Refused(t, "route_foreign_ca")
}

// TestAttackClientPlaintext: on a TLS client port a plaintext client is
// refused (with the admin credentials), a client verifying with the CA
// gets in; with verify, a client without a certificate, or with one of
// another CA, is refused, and one with a certificate of the CA gets in.
// No refused client ever shows up as a connection.
func TestAttackClientPlaintext(t *testing.T) {
	ca := tlstest.NewT(t)
	for _, verify := range []bool{false, true} {
		t.Run(fmt.Sprintf("verify=%v", verify), func(t *testing.T) {
			srv := ca.ServerT(t, "n1")
			srv.Verify = verify
			f := natstest.RunFabric(t, 1, natstest.WithTLS(srv))
			trust := f.Trust()
			url := f.Node(0).ClientURL()
			clients := func() int { return f.Node(0).Server().NumClients() }
			before := clients()
			// A refused connection is counted while its handshake fails;
			// it must be gone at once after.
			noneLeft := func(name string) {
				t.Helper()
				natstest.WaitFor(t, 2*time.Second, func() error {
					if got := clients(); got != before {
						return fmt.Errorf("%s: clients %d, was %d", name, got, before)
					}
					return nil
				})
			}
			dial := func(tc *tls.Config) error {
				opts := []nats.Option{nats.UserJWTAndSeed(trust.AdminUserJWT, trust.AdminUserSeed), nats.NoReconnect(), nats.Timeout(2 * time.Second)}
				if tc != nil {
					opts = append(opts, nats.Secure(tc))
				}
				nc, err := nats.Connect(url, opts...)
				if err != nil {
					return err
				}
				defer nc.Close()
				_, err = nc.Request("$JS.API.INFO", nil, 2*time.Second)
				return err
			}
			clientTLS := func(c tlsconf.Config) *tls.Config {
				tc, err := c.Client("")
				if err != nil {
					t.Fatal(err)
				}
				return tc
			}
			if err := plaintextClient(url, trust); err == nil {
				t.Fatal("a plaintext client got in")
			} else {
				t.Logf("plaintext (raw protocol, no TLS): %v", err)
			}
			noneLeft("plaintext")
			// nats.go upgrades to TLS when the server asks; without the
			// CA it refuses the server instead.
			refused := map[string]*tls.Config{"no_ca": nil}
			if verify {
				refused["no_cert"] = clientTLS(ca.Trust())
				other := tlstest.NewT(t).ClientT(t, "rogue")
				other.CAFile = ca.CAFile // trusts the server, presents a foreign cert
				refused["foreign_cert"] = clientTLS(other)
			}
			for name, tc := range refused {
				if err := dial(tc); err == nil {
					t.Fatalf("%s client got in", name)
				} else {
					t.Logf("%s: %v", name, err)
				}
				noneLeft(name)
			}
			good := ca.Trust()
			if verify {
				good = ca.ClientT(t, "svc")
			}
			if err := dial(clientTLS(good)); err != nil {
				t.Fatalf("client with the CA refused: %v", err)
			}
			// The platform's own connection (Trust.ClientTLS) works.
			nc := f.Conn()
			if _, err := nc.Request("$JS.API.INFO", nil, 2*time.Second); err != nil {
				t.Fatalf("platform connection: %v", err)
			}
			attack.Refused(t, fmt.Sprintf("client_plaintext_verify_%v", verify))
		})
	}
}

// plaintextClient speaks the client protocol without TLS to a port that
// requires it: INFO, then CONNECT with the admin credentials and PING. It
// returns nil only if the server answers PONG.
func plaintextClient(rawURL string, trust *embeddednats.Trust) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return err
	}
	conn, err := net.DialTimeout("tcp", u.Host, 2*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(conn)
	info, err := br.ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.Contains(info, `"tls_required":true`) {
		return nil // a plaintext port: the attack would get in
	}
	fmt.Fprintf(conn, "CONNECT {\"verbose\":false,\"pedantic\":false,\"jwt\":%q,\"headers\":true}\r\nPING\r\n", trust.AdminUserJWT)
	var rest bytes.Buffer
	_, _ = rest.ReadFrom(br)
	if strings.Contains(rest.String(), "PONG") {
		return nil
	}
	return fmt.Errorf("refused: %q", strings.TrimSpace(rest.String()))
}
