package dockertest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/internal/attack"
	"github.com/msgplatform/platform/internal/tlsconf"
)

// PlaintextSession dials a NATS client port at addr without TLS, as a
// client that ignores the server's tls_required would, sends CONNECT, a
// PUB on subject and a PING, and returns everything the server wrote
// (its INFO first) until it closed the connection or 5 s passed. A port
// that holds TLS answers with an error and no PONG.
func PlaintextSession(tb testing.TB, addr, subject string) string {
	tb.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		tb.Fatalf("dial %s: %v", addr, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	rd := bufio.NewReader(c)
	info, err := rd.ReadString('\n')
	if err != nil {
		tb.Fatalf("read INFO from %s: %v", addr, err)
	}
	fmt.Fprintf(c, "CONNECT {\"verbose\":false,\"pedantic\":false,\"tls_required\":false}\r\nPUB %s 6\r\nplain!\r\nPING\r\n", subject)
	var b strings.Builder
	b.WriteString(info)
	for {
		l, err := rd.ReadString('\n')
		b.WriteString(l)
		if err != nil {
			return b.String()
		}
	}
}

// Rogue is a platformd container started from a rig's image on its
// network, as an intruder who reached the cluster port would run one.
type Rogue struct {
	ID string
	IP string
}

// StartRogue starts image as node name (mode node, the image's config
// file config) on network, dialling routes, with its own trust (made by
// the image's `init` in a fresh directory: not the rig's) and the TLS
// files in tlsDir mounted at /tls. The container is removed when the test
// ends.
func StartRogue(tb testing.TB, image, network, config, name, tlsDir string, uid, gid int, routes ...string) Rogue {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := filepath.Join(tb.TempDir(), "rogue-"+name)
	for _, d := range []string{dir, filepath.Join(dir, "trust")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			tb.Fatal(err)
		}
		if err := os.Chown(d, uid, gid); err != nil {
			tb.Fatal(err)
		}
	}
	if out, err := exec.CommandContext(ctx, "docker", "run", "--rm", "--network", "none", "-v", dir+":/init", image, "init", "--data-dir", "/init").CombinedOutput(); err != nil {
		tb.Fatalf("rogue %s: platformd init: %v\n%s", name, err, out)
	}
	cname := fmt.Sprintf("%s-%s", network, name)
	out, err := exec.CommandContext(ctx, "docker", "run", "-d", "--name", cname, "--hostname", name, "--network", network,
		"-e", "PLATFORM_NODE_NAME="+name,
		"-e", "PLATFORM_NODE_CLUSTER_ADVERTISE="+name+":6222",
		"-e", "PLATFORM_NODE_CLUSTER_ROUTES="+strings.Join(routes, ","),
		"-v", filepath.Join(dir, "trust")+":/data/trust:ro",
		"-v", tlsDir+":/tls:ro",
		image, "--config", config).CombinedOutput()
	if err != nil {
		tb.Fatalf("rogue %s: docker run: %v\n%s", name, err, out)
	}
	id := strings.TrimSpace(string(out))
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = exec.CommandContext(ctx, "docker", "rm", "-f", id).Run()
	})
	ip, err := exec.CommandContext(ctx, "docker", "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", id).Output()
	if err != nil {
		tb.Fatalf("rogue %s: docker inspect: %v", name, err)
	}
	return Rogue{ID: id, IP: strings.TrimSpace(string(ip))}
}

// Logs is `docker logs` of container id (stdout and stderr).
func Logs(tb testing.TB, id string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "docker", "logs", id).CombinedOutput()
	if err != nil {
		tb.Fatalf("docker logs %s: %v\n%s", id, err, out)
	}
	return string(out)
}

// Link is one route or leafnode connection a node reports.
type Link struct {
	Server, Kind, RemoteName, IP string
}

// Links asks every node reachable at url (TLS verified against caFile) as
// the system user of the trust in trustDir for its routes ($SYS ROUTEZ)
// and leafnode connections (LEAFZ), waiting 2 s for the answers.
func Links(tb testing.TB, trustDir, url, caFile string) []Link {
	tb.Helper()
	trust, err := embeddednats.LoadTrust(trustDir)
	if err != nil {
		tb.Fatal(err)
	}
	tc, err := tlsconf.Config{CAFile: caFile}.Client("")
	if err != nil {
		tb.Fatal(err)
	}
	nc, err := embeddednats.ConnectSystem(trust, url, nats.Secure(tc), nats.Timeout(5*time.Second))
	if err != nil {
		tb.Fatalf("connect as the system user: %v", err)
	}
	defer nc.Close()
	var out []Link
	for _, kind := range []string{"ROUTEZ", "LEAFZ"} {
		inbox := nats.NewInbox()
		sub, err := nc.SubscribeSync(inbox)
		if err != nil {
			tb.Fatal(err)
		}
		if err := nc.PublishRequest("$SYS.REQ.SERVER.PING."+kind, inbox, []byte("{}")); err != nil {
			tb.Fatal(err)
		}
		for {
			m, err := sub.NextMsg(2 * time.Second)
			if err != nil {
				break
			}
			var resp struct {
				Server struct {
					Name string `json:"name"`
				} `json:"server"`
				Data struct {
					Routes []struct {
						RemoteName string `json:"remote_name"`
						IP         string `json:"ip"`
					} `json:"routes"`
					Leafs []struct {
						Name string `json:"name"`
						IP   string `json:"ip"`
					} `json:"leafs"`
				} `json:"data"`
			}
			if err := json.Unmarshal(m.Data, &resp); err != nil {
				tb.Fatalf("%s answer: %v", kind, err)
			}
			for _, r := range resp.Data.Routes {
				out = append(out, Link{Server: resp.Server.Name, Kind: "route", RemoteName: r.RemoteName, IP: r.IP})
			}
			for _, l := range resp.Data.Leafs {
				out = append(out, Link{Server: resp.Server.Name, Kind: "leafnode", RemoteName: l.Name, IP: l.IP})
			}
		}
		_ = sub.Unsubscribe()
	}
	return out
}

// PlaintextRefused fails the test when the published client port of any
// of nodes serves a plaintext client (PlaintextSession publishing on
// subject): it must say TLS is required and answer no PING.
func PlaintextRefused(tb testing.TB, natsPort map[string]int, subject string, nodes ...string) {
	tb.Helper()
	for _, n := range nodes {
		out := PlaintextSession(tb, fmt.Sprintf("127.0.0.1:%d", natsPort[n]), subject)
		if !strings.Contains(out, `"tls_required":true`) || strings.Contains(out, "PONG") {
			tb.Fatalf("plaintext client on %s: the port served it:\n%s", n, out)
		}
	}
}

// RoguesRefused fails the test unless links (what the nodes reported)
// hold a link of kind (else it says "no node reported <what>"), each
// rogue's log shows a refused <refused> (it dialled), and no link comes
// from a rogue; each rogue's name is then recorded with attack.Refused.
func RoguesRefused(tb testing.TB, links []Link, rogues map[string]Rogue, kind, what, refused string) {
	tb.Helper()
	n := 0
	for _, l := range links {
		if l.Kind == kind {
			n++
		}
	}
	if n == 0 {
		tb.Fatalf("no node reported %s: %+v", what, links)
	}
	for name, rogue := range rogues {
		logs := Logs(tb, rogue.ID)
		if !strings.Contains(logs, "Authorization Violation") && !strings.Contains(strings.ToLower(logs), "tls") {
			tb.Fatalf("%s: the rogue node's log shows no refused %s (did it dial?):\n%s", name, refused, logs)
		}
		for _, l := range links {
			if l.IP == rogue.IP || strings.HasPrefix(l.RemoteName, "rogue") {
				tb.Fatalf("%s: %s has a %s from the rogue: %+v", name, l.Server, l.Kind, l)
			}
		}
		attack.Refused(tb, name)
	}
}
