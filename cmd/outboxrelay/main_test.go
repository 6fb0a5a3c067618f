package main

import (
	"bufio"
	"context"
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

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/pgtest"
	"github.com/msgplatform/platform/outboxrelay"
	"github.com/msgplatform/platform/outboxrelay/pgoutbox"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
)

// buildBinary builds the command (static, as shipped) into a temp dir.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "outboxrelay")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// relayProc is one run of the binary.
type relayProc struct {
	cmd   *exec.Cmd
	lines chan string // stderr lines
	done  chan error
}

func startRelay(t *testing.T, bin string, env []string, args ...string) *relayProc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &relayProc{cmd: cmd, lines: make(chan string, 1024), done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			t.Logf("relay[%d]: %s", cmd.Process.Pid, sc.Text())
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-p.done; p.done <- nil })
	return p
}

// waitLine waits for a stderr line containing s.
func (p *relayProc) waitLine(t *testing.T, s string, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case l := <-p.lines:
			if strings.Contains(l, s) {
				return
			}
		case err := <-p.done:
			p.done <- err
			t.Fatalf("relay exited (%v) before printing %q", err, s)
		case <-deadline:
			t.Fatalf("relay did not print %q within %s", s, timeout)
		}
	}
}

// metric scrapes one sample, e.g. outboxrelay_publishes_total{...outcome="duplicate"}.
func metric(addr, name, label string) (float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, name) && strings.Contains(l, label) {
			f := strings.Fields(l)
			return strconv.ParseFloat(f[len(f)-1], 64)
		}
	}
	return 0, fmt.Errorf("no sample %s{%s}", name, label)
}

// TestBinaryKilledBetweenPublishAndMark runs the built binary against a
// real 3-node fabric and PostgreSQL, SIGKILLs it after it published a
// batch and before it marked it sent, restarts it, and checks that every
// event is in the stream exactly once, in per-key order, with the
// republished ones counted as duplicates; then SIGTERM stops it cleanly.
func TestBinaryKilledBetweenPublishAndMark(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	pool := pgtest.NewPool(t)
	dsn := pool.Config().ConnString()
	bin := buildBinary(t)
	f := natstest.RunFabric(t, 3)
	creds, err := f.Trust().WriteCreds(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	js := f.JetStream()
	const topic = "orders"
	spec := platform.DefaultTopicSpec(topic)
	spec.Partitions, spec.Replicas, spec.Owner = 4, 3, "test"
	if _, err := catalog.NewReconciler(js, catalog.ReconcilerOptions{}).ApplyTopic(ctx, spec, catalog.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pgoutbox.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	const keys, perKey = 20, 15
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for i := range perKey {
			for k := range keys {
				ev := outboxrelay.Event{ID: fmt.Sprintf("ev-%d-%d", k, i), Topic: topic, Key: fmt.Sprintf("k%d", k), Payload: []byte(strconv.Itoa(i))}
				if err := pgoutbox.Enqueue(ctx, tx, ev); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", natstest.FreePorts(t, 1)[0])
	args := []string{"--dsn", dsn, "--nats", f.ClientURLs(), "--creds", creds, "--name", "orders-svc",
		"--lease-ttl", "2s", "--batch", "50", "--http", addr}

	// 1. Killed between publish and mark.
	p := startRelay(t, bin, []string{envPauseAfterPublish + "=1"}, args...)
	p.waitLine(t, faultLine, time.Minute)
	time.Sleep(200 * time.Millisecond) // let more publishes of the pipeline land
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = <-p.done
	p.done <- err
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) || exitErr.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("relay exit: %v, want killed by SIGKILL", err)
	}
	st, err := pgoutbox.New(pool).Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	info, err := js.Stream(ctx, platform.StreamName(topic))
	if err != nil {
		t.Fatal(err)
	}
	stored := int64(info.CachedInfo().State.Msgs)
	marked := int64(keys*perKey) - st.Unsent
	t.Logf("after SIGKILL: %d stored in the stream, %d marked sent", stored, marked)
	if stored <= marked {
		t.Fatalf("no event was published and left unmarked (stored %d, marked %d): the kill did not fall between publish and mark", stored, marked)
	}

	// 2. Restarted: it waits out the dead relay's lease, then republishes
	// the unmarked events with their ids.
	p = startRelay(t, bin, nil, args...)
	natstest.WaitFor(t, time.Minute, func() error {
		st, err := pgoutbox.New(pool).Stats(ctx)
		if err != nil {
			return err
		}
		if st.Unsent > 0 {
			return fmt.Errorf("%d unsent", st.Unsent)
		}
		return nil
	})
	natstest.WaitFor(t, 10*time.Second, func() error {
		dup, err := metric(addr, "outboxrelay_publishes_total", `outcome="duplicate"`)
		if err != nil {
			return err
		}
		if dup < 1 {
			return fmt.Errorf("no duplicate publish counted yet")
		}
		return nil
	})

	// 3. Every event exactly once, in order per key.
	checkStream(t, js, topic, keys, perKey)

	// 4. SIGTERM: graceful stop, exit code 0.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil {
			t.Fatalf("relay after SIGTERM: %v, want exit 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("relay did not stop within 30s of SIGTERM")
	}
}

// checkStream reads the whole stream and checks 0 lost, 0 duplicates and
// per-key order.
func checkStream(t *testing.T, js jetstream.JetStream, topic string, keys, perKey int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := js.OrderedConsumer(ctx, platform.StreamName(topic), jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	next := map[string]int{}
	for total := 0; total < keys*perKey; {
		batch, err := c.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			id := msg.Headers().Get(jetstream.MsgIDHeader)
			seen[id]++
			key := msg.Subject()
			i, _ := strconv.Atoi(string(msg.Data()))
			if i != next[key] {
				t.Errorf("%s: got event %d, want %d (order broken)", key, i, next[key])
			}
			next[key] = i + 1
		}
		if n == 0 {
			// An empty fetch can be a slow moment (a busy CI machine),
			// not the end: stop only when the read's time is up.
			if ctx.Err() != nil {
				break
			}
			continue
		}
		total += n
	}
	lost, dups := 0, 0
	for k := range keys {
		for i := range perKey {
			switch n := seen[fmt.Sprintf("ev-%d-%d", k, i)]; {
			case n == 0:
				lost++
			case n > 1:
				dups += n - 1
			}
		}
	}
	if lost != 0 || dups != 0 || len(seen) != keys*perKey {
		t.Fatalf("stream: %d lost, %d duplicates, %d distinct ids (want 0, 0, %d)", lost, dups, len(seen), keys*perKey)
	}
}
