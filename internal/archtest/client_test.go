package archtest

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/msgplatform/platform/"

// serverPrefix is the broker's module: no client package may depend on it.
const serverPrefix = "github.com/nats-io/nats-server"

// clientPackages are what a service imports to use the platform, the
// canary monitor and the outbox relay's binary. (The inbox contract is in
// platform itself.)
var clientPackages = []string{
	"platform",
	"platform/canary",
	"platform/catalog",
	"platform/consumer",
	"platform/dlq",
	"platform/schema",
	"platform/inbox/pginbox",
	"platform/inbox/pebbleinbox",
	"outboxrelay",
	"outboxrelay/pgoutbox",
	"outboxrelay/pebbleoutbox",
	"cmd/outboxrelay",
}

// TestClientLinksNoServer lists the non-test dependencies of every client
// package in one go list call and fails, per package, with the shortest
// import chain to a nats-server package.
func TestClientLinksNoServer(t *testing.T) {
	args := []string{"list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}"}
	for _, p := range clientPackages {
		args = append(args, module+p)
	}
	cmd := exec.Command("go", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, stderr.Bytes())
	}
	imports := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) > 0 {
			imports[f[0]] = f[1:]
		}
	}
	isServer := func(p string) bool { return strings.HasPrefix(p, serverPrefix) }
	for _, p := range clientPackages {
		if chain := chainTo(imports, module+p, isServer); chain != nil {
			t.Errorf("%s links the broker: %s", p, strings.Join(chain, " -> "))
		}
	}
}

// chainTo returns the shortest import chain from root to a package bad
// reports (root and that package included), or nil when there is none.
func chainTo(imports map[string][]string, root string, bad func(string) bool) []string {
	prev := map[string]string{root: ""}
	queue := []string{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if bad(p) {
			var chain []string
			for ; p != ""; p = prev[p] {
				chain = append(chain, p)
			}
			slices.Reverse(chain)
			return chain
		}
		for _, q := range imports[p] {
			if _, seen := prev[q]; !seen {
				prev[q] = p
				queue = append(queue, q)
			}
		}
	}
	return nil
}
