package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"math"
	"strings"
	"testing"

	"github.com/msgplatform/platform/internal/capacity"
	"github.com/msgplatform/platform/internal/cli"
)

// The -update flag rewrites golden files. It is registered only if no other
// test file of the package registered it first, so golden tests can share it.
func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite golden files in testdata/")
	}
}

func updateGolden() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

// guideRows is the capacity table of the design guide
// (shared/reference/000_f1d5a7acba12afbc.txt), verbatim. The golden file must
// agree with it, so it cannot drift from the guide unnoticed.
var guideRows = [][3]string{
	{"Average ingest", "20,000 events/s × 1 KiB", "19.53 MiB/s"},
	{"Peak ingest (5×)", "100,000 events/s × 1 KiB", "97.66 MiB/s"},
	{"Per day at average", "20,000 × 1,024 B × 86,400 s", "1.769 TB decimal, 1.609 TiB"},
	{"3 days at average, logical", "3 × 1.609 TiB", "4.83 TiB"},
	{"3 days with replication factor 3", "4.83 TiB × 3", "14.48 TiB, excluding indexes, overhead and headroom"},
	{"Group deliveries (3 groups)", "3 × 20,000/s", "60,000/s average, 300,000/s at peak"},
	{"Broker egress, average", "39.06 follower replication + 58.59 consumer fetch", "about 97.66 MiB/s"},
	{"Broker egress, peak (5×)", "97.66 × 5", "about 488.28 MiB/s, before protocol overhead, compression and batching"},
	{"Consumers per group, average", "20,000 ÷ 2,000 (hypothetical)", "10 per group, 30 total"},
	{"Consumers per group, peak", "100,000 ÷ 2,000 (hypothetical)", "50 per group; 24 partitions allow at most 24"},
	{"Ten-minute peak, gross", "100,000 × 1,024 × 600", "57.22 GiB (60,000,000 events)"},
	{"Ten-minute peak, above baseline", "80,000 × 1,024 × 600", "45.78 GiB (48,000,000 extra events)"},
}

// runCapacity runs platformctl capacity with args and returns its output.
func runCapacity(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newCapacityCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(append([]string{}, args...)) // never nil: nil makes cobra read os.Args
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.Execute()
	return out.String(), err
}

func mustRunCapacity(t *testing.T, args ...string) string {
	t.Helper()
	out, err := runCapacity(t, args...)
	if err != nil {
		t.Fatalf("capacity %v: %v", args, err)
	}
	return out
}

func TestCapacityGolden(t *testing.T) {
	checkGolden(t, "capacity_harborcart.golden", mustRunCapacity(t))
}

// TestCapacityMatchesGuide checks the table row by row against the guide,
// and the figures of the paragraph that follows it.
func TestCapacityMatchesGuide(t *testing.T) {
	out := mustRunCapacity(t)
	var rows [][3]string
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "| ") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 3 {
			t.Fatalf("row %q has %d cells", line, len(cells))
		}
		rows = append(rows, [3]string{strings.TrimSpace(cells[0]), strings.TrimSpace(cells[1]), strings.TrimSpace(cells[2])})
	}
	if len(rows) == 0 || rows[0] != [3]string{"Quantity", "Computation", "Result"} {
		t.Fatalf("missing header row in:\n%s", out)
	}
	rows = rows[1:]
	if len(rows) != len(guideRows) {
		t.Fatalf("got %d rows, the guide has %d", len(rows), len(guideRows))
	}
	for i, want := range guideRows {
		if rows[i] != want {
			t.Errorf("row %d:\n got %q\nwant %q", i+1, rows[i], want)
		}
		wantContains(t, "output", out, want[:]...)
	}
	wantContains(t, "output", out,
		"24 partitions cap a group at 24 active consumers and 48,000/s",
		"48 partitions would reach 96,000/s, still below the 100,000/s peak",
		"the peak needs 50 partitions",
		"34.33 GiB, 36,000,000 events",
		"draining at 50,000/s against 20,000/s arriving takes 20m0s",
		"WARNING: 24 partitions allow at most 24 consumers against 50 needed at peak",
		"WARNING: 24 partitions × 2,000/s = 48,000/s < 100,000/s peak",
	)
}

func TestCapacitySizeUnits(t *testing.T) {
	want := mustRunCapacity(t, "--size", "1024")
	for _, size := range []string{"1KiB", "1 KiB", "1kib"} {
		if got := mustRunCapacity(t, "--size", size); got != want {
			t.Errorf("--size %q differs from --size 1024:\n%s", size, got)
		}
	}
	if got := mustRunCapacity(t, "--size", "1KB"); !strings.Contains(got, "20,000 events/s × 1,000 B") {
		t.Errorf("--size 1KB is not 1,000 bytes:\n%s", got)
	}
}

// TestCapacityTenKiB is the guide's follow-up question: with 10 KiB events
// every byte figure scales tenfold and every event figure stays.
func TestCapacityTenKiB(t *testing.T) {
	figures := func(size string) map[string]float64 {
		var doc struct {
			Figures map[string]float64 `json:"figures"`
		}
		if err := json.Unmarshal([]byte(mustRunCapacity(t, "-o", "json", "--size", size)), &doc); err != nil {
			t.Fatal(err)
		}
		return doc.Figures
	}
	one, ten := figures("1KiB"), figures("10KiB")
	if len(one) < 20 {
		t.Fatalf("only %d figures: %v", len(one), one)
	}
	for k, v := range one {
		want := v
		if strings.Contains(k, "bytes") {
			want = 10 * v
		}
		if math.Abs(ten[k]-want) > 1e-9*math.Abs(want) {
			t.Errorf("%s: 1 KiB %v, 10 KiB %v, want %v", k, v, ten[k], want)
		}
	}
	out := mustRunCapacity(t, "--size", "10KiB")
	wantContains(t, "10 KiB output", out, "195.31 MiB/s", "976.56 MiB/s", "144.84 TiB", "572.20 GiB (60,000,000 events)", "50 per group")
}

func TestCapacityInvalidInputs(t *testing.T) {
	_, err := runCapacity(t, "--rate", "0", "--partitions", "0", "--size", "banana")
	if err == nil {
		t.Fatal("no error")
	}
	var ue cli.UsageError
	if !errors.As(err, &ue) {
		t.Errorf("error %T is not a cli.UsageError (exit code 2)", err)
	}
	if !errors.Is(err, capacity.ErrInvalidInputs) {
		t.Errorf("error does not match capacity.ErrInvalidInputs: %v", err)
	}
	wantContains(t, "error", err.Error(), "rate: must be > 0, got 0", "partitions: must be >= 1, got 0", "size:", `"banana"`)
	if _, err := runCapacity(t, "-o", "yaml"); err == nil || !strings.Contains(err.Error(), "output: must be table or json") {
		t.Errorf("-o yaml: got %v", err)
	}
	if _, err := runCapacity(t, "--retention", "soon"); !errors.As(err, &ue) {
		t.Errorf("--retention soon: got %v, want a cli.UsageError", err)
	}
}

func TestCapacityJSON(t *testing.T) {
	var doc struct {
		Inputs   map[string]any   `json:"inputs"`
		Rows     []capacity.Row   `json:"rows"`
		Figures  capacity.Figures `json:"figures"`
		Notes    []string         `json:"notes"`
		Warnings []string         `json:"warnings"`
	}
	if err := json.Unmarshal([]byte(mustRunCapacity(t, "-o", "json")), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Rows) != len(guideRows) || doc.Rows[0].Result != "19.53 MiB/s" {
		t.Errorf("rows: %+v", doc.Rows)
	}
	if doc.Figures.DrainSeconds == nil || *doc.Figures.DrainSeconds != 1200 {
		t.Errorf("drain_seconds = %v, want 1200", doc.Figures.DrainSeconds)
	}
	if doc.Inputs["retention"] != "72h0m0s" || len(doc.Notes) != 2 || len(doc.Warnings) != 2 {
		t.Errorf("inputs %v, notes %q, warnings %q", doc.Inputs, doc.Notes, doc.Warnings)
	}
}
