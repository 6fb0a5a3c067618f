package embeddednats

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// A port taken after probePorts found it free (another process binding
// it in between: parallel test binaries pick free ports the same way)
// makes the server fail to listen. Launch says so at once, as
// ErrPortInUse naming the address, instead of waiting out ReadyTimeout
// for a server that will never accept clients; nothing is left running.
func TestLaunchReportsAPortTakenAfterTheProbe(t *testing.T) {
	tr, err := NewTrust()
	if err != nil {
		t.Fatal(err)
	}
	for _, which := range []string{"client", "cluster"} {
		t.Run(which, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Port, cfg.StoreDir, cfg.Durability.Replicas = -1, t.TempDir(), 1
			if which == "cluster" {
				cfg.Cluster.Port = freePort(t)
				cfg.Cluster.Routes = []string{"nats-route://127.0.0.1:" + strconv.Itoa(freePort(t))}
			}
			n, err := NewNode(cfg, tr)
			if err != nil {
				t.Fatal(err)
			}
			var taken net.Listener
			n.afterProbe = func(o *server.Options) {
				host, port := o.Host, o.Port
				if which == "cluster" {
					host, port = o.Cluster.Host, o.Cluster.Port
				}
				if port <= 0 { // the client port is picked by the server: take a fixed one
					port = freePort(t)
					o.Port = port
				}
				if taken, err = net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port))); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			err = n.Launch()
			took := time.Since(start)
			if taken != nil {
				defer taken.Close()
			}
			if !errors.Is(err, ErrPortInUse) || !strings.Contains(err.Error(), "address already in use") {
				t.Fatalf("Launch with its %s port taken: %v, want ErrPortInUse with the server's reason", which, err)
			}
			if took > 10*time.Second {
				t.Errorf("Launch took %s to fail (ReadyTimeout %s): it waited instead of reading the server's failure", took, cfg.ReadyTimeout)
			}
			if n.Server() != nil {
				t.Error("a node whose start failed has a server")
			}
			t.Logf("%s: failed after %s: %v", which, took.Round(time.Millisecond), err)
		})
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
