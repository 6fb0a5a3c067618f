package embeddednats_test

import (
	"crypto/tls"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/attack"
	"github.com/msgplatform/platform/internal/tlsconf/tlstest"
)

func startNode(t *testing.T, cfg embeddednats.Config, trust *embeddednats.Trust) *embeddednats.Node {
	t.Helper()
	n, err := embeddednats.NewNode(cfg, trust)
	if err != nil {
		t.Fatal(err)
	}
	natstest.Start(t, n, 30*time.Second)
	return n
}

// TestAttackLeafWithoutCert: with node.leaf.tls (verify), a region link
// comes up over mTLS; a rogue leafnode that holds valid link credentials
// but no certificate of the CA, or speaks plaintext, or holds a
// certificate but no credentials, is refused and the listener keeps
// exactly the one legitimate link (control: with both it links).
func TestAttackLeafWithoutCert(t *testing.T) {
	dir := t.TempDir()
	trust := natstest.Trust(t, dir)
	ca := tlstest.NewT(t)
	node := func(name string) embeddednats.Config {
		c := embeddednats.DefaultConfig()
		c.Name, c.Region = name, embeddednats.Region{Name: name}
		c.Port = -1
		c.StoreDir = filepath.Join(dir, name)
		c.Durability.Replicas = 1
		c.LameDuck = 100 * time.Millisecond
		c.Leaf.TLS = ca.ServerT(t, name)
		c.Leaf.TLS.Verify = true
		return c
	}
	ac := node("eu")
	ac.Leaf.Host, ac.Leaf.Port = "127.0.0.1", natstest.FreePorts(t, 1)[0]
	a := startNode(t, ac, trust)
	bc := node("us")
	bc.Leaf.Remotes = []embeddednats.LeafRemote{{URLs: []string{a.LeafURL()}}}
	bc.TLS = ca.ServerT(t, "us") // the client port too, for the reload below
	b := startNode(t, bc, trust)
	natstest.WaitFor(t, 15*time.Second, func() error {
		if a.Linked() != 1 || b.Linked() != 1 {
			return fmt.Errorf("links: eu %d, us %d", a.Linked(), b.Linked())
		}
		return nil
	})
	lz, err := a.Server().Leafz(&server.LeafzOptions{})
	if err != nil || len(lz.Leafs) != 1 {
		t.Fatalf("leafz: %+v %v", lz, err)
	}

	creds, err := trust.LinkCreds()
	if err != nil {
		t.Fatal(err)
	}
	credsFile := filepath.Join(dir, "rogue.creds")
	if err := os.WriteFile(credsFile, creds, 0o600); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(a.LeafURL())
	good, err := ca.ClientT(t, "control").Client("")
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		name  string
		tc    *tls.Config
		creds string
	}{
		{"no_cert", &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}, credsFile},
		{"plaintext", nil, credsFile},
		{"cert_without_credentials", good, ""},
		{"control", good, credsFile},
	} {
		ro := &server.RemoteLeafOpts{URLs: []*url.URL{u}, Credentials: bad.creds}
		if bad.tc != nil {
			ro.TLS, ro.TLSConfig, ro.TLSTimeout = true, bad.tc, 2
		}
		rogue, err := server.NewServer(&server.Options{ServerName: "rogue-leaf", Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true,
			LeafNode: server.LeafNodeOpts{Remotes: []*server.RemoteLeafOpts{ro}, ReconnectInterval: 100 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		go rogue.Start()
		if !rogue.ReadyForConnections(5 * time.Second) {
			t.Fatal("rogue leaf not ready")
		}
		linked := false
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			linked = linked || rogue.NumLeafNodes() > 0 || a.Linked() != 1
		}
		rogue.Shutdown()
		if bad.name == "control" {
			if !linked {
				t.Fatal("control: a leafnode with the link credentials and a certificate of the CA did not link; the refusals above prove nothing")
			}
			continue
		}
		if linked {
			t.Fatalf("%s: the rogue leafnode linked (eu has %d links)", bad.name, a.Linked())
		}
		t.Logf("%s: refused; eu keeps %d link", bad.name, a.Linked())
	}
	// A deny-list change reloads the dialling node with its TLS (client
	// port and link); the link comes back over mTLS.
	if err := b.SetLeafDeny([]string{"resident.>"}); err != nil {
		t.Fatalf("reload with leaf TLS: %v", err)
	}
	natstest.WaitFor(t, 15*time.Second, func() error {
		if a.Linked() != 1 || b.Linked() != 1 {
			return fmt.Errorf("links after reload: eu %d, us %d", a.Linked(), b.Linked())
		}
		return nil
	})
	attack.Refused(t, "leaf_without_cert")
}
