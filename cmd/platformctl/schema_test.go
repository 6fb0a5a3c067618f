package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/daemon/daemontest"
)

func TestSchemaCLI(t *testing.T) {
	d := daemontest.Start(t, 1)
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	v1 := write("v1.json", `{"type":"object","properties":{"orderId":{"type":"string"},"total":{"type":"number"}},"required":["orderId"]}`)
	v2 := write("v2.json", `{"type":"object","properties":{"orderId":{"type":"string"},"total":{"type":"number"},"customerId":{"type":"string"}},"required":["orderId","customerId"]}`)
	v3 := write("v3.json", `{"title":"v3","type":"object","properties":{"orderId":{"type":"string"},"total":{"type":"number"}},"required":["orderId"]}`)
	bad := write("bad.json", `{"type":`)

	if out := mustCLI(t, d, "schema", "register", "OrderPlaced", "--file", v1); !strings.Contains(out, "registered OrderPlaced v1 (mode backward") {
		t.Fatalf("register v1:\n%s", out)
	}
	if out := mustCLI(t, d, "schema", "register", "OrderPlaced", "--file", v1); !strings.Contains(out, "unchanged: OrderPlaced v1") {
		t.Fatalf("register v1 again:\n%s", out)
	}
	out, err := runCLI(t, d, "schema", "check", "OrderPlaced", "--file", v2)
	if !errors.Is(err, errIncompatible) || !strings.Contains(out, `[required-added] backward: field "customerId" became required in v2; data written with v1 may lack it`) {
		t.Fatalf("check v2: %v\n%s", err, out)
	}
	_, err = runCLI(t, d, "schema", "register", "OrderPlaced", "--file", v2)
	if !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), `field "customerId" became required in v2`) {
		t.Fatalf("register v2 under backward: %v", err)
	}
	if out := mustCLI(t, d, "schema", "register", "OrderPlaced", "--file", v2, "--mode", "forward"); !strings.Contains(out, "registered OrderPlaced v2 (mode forward; checked against v1") {
		t.Fatalf("register v2 under forward:\n%s", out)
	}
	// The guide's case: under full, v3 dropping customerId is refused.
	_, err = runCLI(t, d, "schema", "register", "OrderPlaced", "--file", v3, "--mode", "full")
	if !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), `forward: field "customerId" is required by v2 but not by v3`) {
		t.Fatalf("register v3 under full: %v", err)
	}
	if out := mustCLI(t, d, "schema", "check", "OrderPlaced", "--file", v3, "--mode", "backward"); !strings.Contains(out, "compatible: it would become OrderPlaced v3 (mode backward") {
		t.Fatalf("check v3 under backward:\n%s", out)
	}
	if out := mustCLI(t, d, "schema", "mode", "OrderPlaced", "full_transitive"); !strings.Contains(out, "OrderPlaced: mode full_transitive") {
		t.Fatalf("mode:\n%s", out)
	}
	out = mustCLI(t, d, "schema", "list")
	if !strings.Contains(out, "TYPE") || !strings.Contains(out, "OrderPlaced") || !strings.Contains(out, "full_transitive") || !strings.Contains(out, "v2") {
		t.Fatalf("list:\n%s", out)
	}
	out = mustCLI(t, d, "schema", "show", "OrderPlaced", "--version", "1")
	if !strings.Contains(out, "Schema OrderPlaced v1 of 2") || !strings.Contains(out, `"orderId"`) || strings.Contains(out, "customerId") {
		t.Fatalf("show v1:\n%s", out)
	}
	if out = mustCLI(t, d, "schema", "show", "OrderPlaced"); !strings.Contains(out, "v2 of 2") {
		t.Fatalf("show latest:\n%s", out)
	}

	// Clear errors for bad input.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"schema", "register", "OrderPlaced"}, "--file"},
		{[]string{"schema", "register", "OrderPlaced", "--file", bad}, "not JSON"},
		{[]string{"schema", "register", "OrderPlaced", "--file", filepath.Join(dir, "missing.json")}, "missing.json"},
		{[]string{"schema", "register", "OrderPlaced", "--file", v1, "--mode", "sideways"}, "want one of none, backward"},
		{[]string{"schema", "register", "Order.Placed", "--file", v1}, "event type name"},
		{[]string{"schema", "show", "Nope"}, `no subject "Nope"`},
		{[]string{"schema", "show", "OrderPlaced", "--version", "9"}, "versions 1..2, not 9"},
	} {
		_, err := runCLI(t, d, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err = %v, want it to mention %q", c.args, err, c.want)
		}
	}
}
