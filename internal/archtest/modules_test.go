package archtest

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

// testOnlyModules are modules only tests use, and heavy ones: they belong
// to the nested test modules (deploy/prometheus,
// internal/console/browsertest), never to this module's requirements,
// which every service importing a client package downloads.
var testOnlyModules = []string{
	"github.com/chromedp/",
	"github.com/prometheus/prometheus",
}

// TestModuleGraphHoldsNoTestOnlyModules fails naming each test-only
// module found in this module's graph (go list -m all).
func TestModuleGraphHoldsNoTestOnlyModules(t *testing.T) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Path}}", "all")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -m all: %v\n%s", err, stderr.Bytes())
	}
	for line := range strings.Lines(string(out)) {
		m := strings.TrimSpace(line)
		for _, p := range testOnlyModules {
			if m == strings.TrimSuffix(p, "/") || strings.HasPrefix(m, p) {
				t.Errorf("module %s is in the platform's module graph: move the test that needs it to a nested test module", m)
			}
		}
	}
}
