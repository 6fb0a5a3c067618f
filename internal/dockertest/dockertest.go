package dockertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/tlsconf/tlstest"
)

// SkipShort skips the test with msg under -short.
func SkipShort(tb testing.TB, msg string) {
	tb.Helper()
	if testing.Short() {
		tb.Skip(msg)
	}
}

// ComposeCommand returns `docker compose` if the plugin answers, else
// docker-compose; it skips the test when the engine or compose is
// missing. The skip messages start with name; noEngine says that no
// engine answers.
func ComposeCommand(tb testing.TB, name, noEngine string) []string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		tb.Skipf("%s: %s (docker info failed): %v: %s", name, noEngine, err, strings.TrimSpace(string(out)))
	}
	var compose []string
	if err := exec.CommandContext(ctx, "docker", "compose", "version").Run(); err == nil {
		compose = []string{"docker", "compose"}
	} else if p, err := exec.LookPath("docker-compose"); err == nil {
		compose = []string{p}
	} else {
		tb.Skipf("%s: no compose tool (neither `docker compose` nor docker-compose works)", name)
	}
	exclusive(tb, name)
	return compose
}

// exclusive holds a host-wide lock until the test ends, so the Docker
// rigs of different test packages (go test runs packages in parallel)
// take turns: nine containers at once on a 2-core machine starve each
// other's restarts past any readiness timeout.
func exclusive(tb testing.TB, name string) {
	tb.Helper()
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "platform-dockertest.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		tb.Fatalf("%s: open the Docker test lock: %v", name, err)
	}
	start := time.Now()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		tb.Fatalf("%s: take the Docker test lock: %v", name, err)
	}
	if waited := time.Since(start); waited > time.Second {
		tb.Logf("%s: waited %s for another package's Docker rig to finish", name, waited.Round(time.Second))
	}
	tb.Cleanup(func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	})
}

// RuntimeIDs returns the user and group the containers run as: the
// images' default (65532) when we are root and can hand it the shared
// directory, else our own ids, so that we can read what the containers
// write and remove it.
func RuntimeIDs() (uid, gid int) {
	uid, gid = os.Getuid(), os.Getgid()
	if uid == 0 {
		uid, gid = 65532, 65532
	}
	return uid, gid
}

// BuildImage builds the static platformd binary of the module at root
// into a fresh build context, copies Dockerfile and files from here into
// it, builds the image tag from it with build args UID and GID, and
// removes the image when the test ends.
func BuildImage(tb testing.TB, root, here, tag string, uid, gid int, files ...string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bctx := tb.TempDir()
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", filepath.Join(bctx, "platformd"), "./cmd/platformd")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		tb.Fatalf("go build ./cmd/platformd: %v\n%s", err, out)
	}
	for _, f := range append([]string{"Dockerfile"}, files...) {
		b, err := os.ReadFile(filepath.Join(here, f))
		if err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bctx, f), b, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(bctx, "data"), 0o700); err != nil {
		tb.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, "docker", "build", "-q", "-t", tag,
		"--build-arg", "UID="+strconv.Itoa(uid), "--build-arg", "GID="+strconv.Itoa(gid), bctx).CombinedOutput()
	if err != nil {
		tb.Fatalf("docker build: %v\n%s", err, out)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "docker", "image", "rm", "-f", tag).CombinedOutput(); err != nil {
			tb.Errorf("docker image rm %s: %v\n%s", tag, err, out)
		}
	})
}

// SharedDir creates the directory the containers share (creds, trust)
// in a test temp dir, with trust/ in it, both owned by uid:gid, and
// returns it. trust/ exists before compose creates the containers, so
// that Docker does not create the bind-mount source itself (as root).
func SharedDir(tb testing.TB, uid, gid int) string {
	tb.Helper()
	shared := filepath.Join(tb.TempDir(), "shared")
	for _, d := range []string{shared, filepath.Join(shared, "trust")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			tb.Fatal(err)
		}
		if err := os.Chown(d, uid, gid); err != nil {
			tb.Fatal(err)
		}
	}
	return shared
}

// Project is a compose project: a compose file run under a unique
// project name with its own environment.
type Project struct {
	Compose []string // the compose command: docker compose or docker-compose
	File    string   // the compose file
	Name    string   // the project name
	Env     []string // the environment of every compose command
}

// Run runs the compose command with args on the project.
func (p *Project) Run(ctx context.Context, args ...string) ([]byte, error) {
	full := append(append(p.Compose[1:len(p.Compose):len(p.Compose)], "-f", p.File, "-p", p.Name), args...)
	cmd := exec.CommandContext(ctx, p.Compose[0], full...)
	cmd.Env = p.Env
	return cmd.CombinedOutput()
}

// Publish sets the project's environment to this process's with the
// image, the shared directory, no restarts, and a free NATS and HTTP host
// port for each of nodes (PLATFORM_DOCKER_<NODE>_NATS and _HTTP), and
// returns those ports by node.
func (p *Project) Publish(tb testing.TB, image, shared string, nodes ...string) (natsPort, httpPort map[string]int) {
	tb.Helper()
	natsPort, httpPort = map[string]int{}, map[string]int{}
	ports := natstest.FreePorts(tb, 2*len(nodes))
	p.Env = append(os.Environ(),
		"PLATFORM_DOCKER_IMAGE="+image,
		"PLATFORM_DOCKER_SHARED="+shared,
		"PLATFORM_DOCKER_RESTART=no",
	)
	for i, n := range nodes {
		natsPort[n], httpPort[n] = ports[2*i], ports[2*i+1]
		up := strings.ToUpper(n)
		p.Env = append(p.Env,
			fmt.Sprintf("PLATFORM_DOCKER_%s_NATS=%d", up, natsPort[n]),
			fmt.Sprintf("PLATFORM_DOCKER_%s_HTTP=%d", up, httpPort[n]))
	}
	return natsPort, httpPort
}

// Up registers the project's teardown (the last logTail lines of compose
// logs if the test failed, then `down -v`), starts the project detached
// and returns the container id of each of services.
func (p *Project) Up(tb testing.TB, logTail int, services ...string) map[string]string {
	tb.Helper()
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if tb.Failed() {
			out, _ := p.Run(ctx, "logs", "--no-color", "--tail="+strconv.Itoa(logTail))
			tb.Logf("compose logs:\n%s", out)
		}
		if out, err := p.Run(ctx, "down", "-v", "--remove-orphans", "-t", "5"); err != nil {
			tb.Errorf("compose down: %v\n%s", err, out)
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := p.Run(ctx, "up", "-d"); err != nil {
		tb.Fatalf("compose up: %v\n%s", err, out)
	}
	ids := make(map[string]string, len(services))
	for _, s := range services {
		out, err := p.Run(ctx, "ps", "-q", s)
		id := strings.TrimSpace(string(out))
		if err != nil || id == "" {
			tb.Fatalf("compose ps -q %s: %v\n%s", s, err, out)
		}
		ids[s] = id
	}
	return ids
}

// WaitReady polls https://127.0.0.1:httpPort[n]/readyz of each of names
// (verified against the rig's CA, tlsFiles) until every one answers
// 200; what names the wait in the failure.
func WaitReady(tb testing.TB, timeout time.Duration, what string, tlsFiles tlstest.RigFiles, httpPort map[string]int, names ...string) {
	tb.Helper()
	c := HTTPClient(tb, tlsFiles)
	WaitFor(tb, timeout, what, func() error {
		var errs []error
		for _, n := range names {
			resp, err := c.Get(fmt.Sprintf("https://127.0.0.1:%d/readyz", httpPort[n]))
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", n, err))
				continue
			}
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				errs = append(errs, fmt.Errorf("%s: %s: %s", n, resp.Status, strings.TrimSpace(string(body))))
			}
		}
		return errors.Join(errs...)
	})
}

// TLSDir writes a throw-away CA and the rig's certificates
// (tlstest.WriteRig: node.pem valid for hosts and loopback, client.pem)
// into shared/tls, owned by uid:gid so that the containers' user reads
// the keys (0600), and returns their paths on this host.
func TLSDir(tb testing.TB, shared string, uid, gid int, hosts ...string) tlstest.RigFiles {
	tb.Helper()
	dir := filepath.Join(shared, "tls")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		tb.Fatal(err)
	}
	files, err := tlstest.WriteRig(dir, hosts...)
	if err != nil {
		tb.Fatal(err)
	}
	for _, f := range []string{dir, files.Node.CAFile, files.Node.CertFile, files.Node.KeyFile, files.Client.CertFile, files.Client.KeyFile} {
		if err := os.Chown(f, uid, gid); err != nil {
			tb.Fatal(err)
		}
	}
	return files
}

// HTTPClient is an HTTPS client of a rig's nodes: it verifies them
// against the rig's CA and presents the rig's client certificate.
func HTTPClient(tb testing.TB, tlsFiles tlstest.RigFiles) *http.Client {
	tb.Helper()
	tc, err := tlsFiles.Client.Client("")
	if err != nil {
		tb.Fatal(err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tc
	return &http.Client{Timeout: 2 * time.Second, Transport: tr}
}

// WaitFor retries f every 200ms until it returns nil, failing the test
// with f's last error after timeout.
func WaitFor(tb testing.TB, timeout time.Duration, what string, f func() error) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("waiting %s for %s: %v", timeout, what, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// RandHex returns n random bytes in hex, for unique tags and names.
func RandHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
