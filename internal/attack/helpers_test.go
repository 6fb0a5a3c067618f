package attack_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/daemon/daemontest"
	"github.com/msgplatform/platform/tenancy"
)

// platformctl is the binary TestMain builds: every tenant, topic and
// user of the suite is made as an operator makes them.
var platformctl string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "attack-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	platformctl = filepath.Join(dir, "platformctl")
	if out, err := exec.Command("go", "build", "-o", platformctl, "github.com/msgplatform/platform/cmd/platformctl").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "attack: build platformctl: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// rig is a running platformd and the operator's tools against it.
type rig struct {
	t   *testing.T
	d   *daemontest.Daemon
	dir string
}

func newRig(t *testing.T, nodes int) *rig {
	t.Helper()
	return &rig{t: t, d: daemontest.Start(t, nodes), dir: t.TempDir()}
}

// ctl runs platformctl as the operator (the admin creds platformd wrote).
func (r *rig) ctl(args ...string) (string, error) {
	r.t.Helper()
	all := append([]string{"--server", r.d.URL(), "--creds", r.d.Creds(), "--timeout", "30s"}, args...)
	cmd := exec.Command(platformctl, all...)
	cmd.Dir = r.dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (r *rig) mustCtl(args ...string) string {
	r.t.Helper()
	out, err := r.ctl(args...)
	if err != nil {
		r.t.Fatalf("platformctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// tenant creates tenant with platformctl, and in it a one-partition
// topic of each of topics.
func (r *rig) tenant(tenant string, topics ...string) {
	r.t.Helper()
	r.mustCtl("tenant", "create", tenant)
	for _, topic := range topics {
		r.mustCtl("tenant", "topic", tenant, topic, "--partitions", "1")
	}
}

// user issues a tenant user's creds with platformctl (exactly the
// permissions named) and returns the file.
func (r *rig) user(tenant, name string, pub, sub []string) string {
	r.t.Helper()
	creds := filepath.Join(r.dir, tenant+"-"+name+".creds")
	args := []string{"user", "add", tenant, name, "--out", creds}
	if len(pub) > 0 {
		args = append(args, "--pub", strings.Join(pub, ","))
	}
	if len(sub) > 0 {
		args = append(args, "--sub", strings.Join(sub, ","))
	}
	r.mustCtl(args...)
	return creds
}

// natsCLI runs the real nats CLI as a tenant user.
func (r *rig) natsCLI(creds, user string, args ...string) (string, error) {
	r.t.Helper()
	bin, err := exec.LookPath("nats")
	if err != nil {
		r.t.Skip("attack: the nats CLI is not on PATH (scripts/test installs natscli v0.5.0)")
	}
	all := append([]string{"--server", r.d.URL(), "--creds", creds, "--inbox-prefix", tenancy.InboxPrefix(user), "--timeout", "3s"}, args...)
	out, err := exec.Command(bin, all...).CombinedOutput()
	return string(out), err
}

// connect connects as a tenant user with its inbox prefix.
func (r *rig) connect(creds, user string) *nats.Conn {
	r.t.Helper()
	nc, err := nats.Connect(r.d.URL(), nats.UserCredentials(creds), nats.CustomInboxPrefix(tenancy.InboxPrefix(user)), nats.Name("attacker-"+user))
	if err != nil {
		r.t.Fatalf("connect as %s: %v", user, err)
	}
	r.t.Cleanup(nc.Close)
	return nc
}

// tenantJS is the platform's view of a tenant's account, to check what
// is stored.
func (r *rig) tenantJS(tenant string) jetstream.JetStream {
	r.t.Helper()
	js, err := r.d.Tenants().TenantJetStream(tenant)
	if err != nil {
		r.t.Fatal(err)
	}
	return js
}

// stored returns every event of a tenant's topic or queue stream.
func (r *rig) stored(tenant, object string) []*nats.RawStreamMsg {
	r.t.Helper()
	js := r.tenantJS(tenant)
	ctx := ctxT(r.t)
	s, err := js.Stream(ctx, tenancy.StreamName(object))
	if err != nil {
		r.t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	var out []*nats.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted
		}
		out = append(out, &nats.RawStreamMsg{Subject: m.Subject, Sequence: m.Sequence, Header: m.Header, Data: m.Data})
	}
	return out
}

// msgs is the number of events in a tenant's object.
func (r *rig) msgs(tenant, object string) uint64 {
	r.t.Helper()
	s, err := r.tenantJS(tenant).Stream(ctxT(r.t), tenancy.StreamName(object))
	if err != nil {
		r.t.Fatal(err)
	}
	info, err := s.Info(ctxT(r.t))
	if err != nil {
		r.t.Fatal(err)
	}
	return info.State.Msgs
}

// usage is the tenant's usage as platformctl reports it.
func (r *rig) usage(tenant string) tenancy.Usage {
	r.t.Helper()
	us, err := r.d.Tenants().Usage(ctxT(r.t), tenant)
	if err != nil || len(us) != 1 {
		r.t.Fatalf("usage %s: %v %v", tenant, us, err)
	}
	return us[0]
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls f every 50 ms until it is true or d passes.
func eventually(d time.Duration, f func() bool) bool {
	for end := time.Now().Add(d); ; time.Sleep(50 * time.Millisecond) {
		if f() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}
