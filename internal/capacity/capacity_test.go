package capacity

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestCapacityParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"1024", 1024},
		{"0", 0},
		{" 1024 ", 1024},
		{"1B", 1},
		{"1KiB", 1024},
		{"1 KiB", 1024},
		{"1kib", 1024},
		{"1KB", 1000},
		{"1 kb", 1000},
		{"10KiB", 10240},
		{"10MiB", 10 << 20},
		{"1MB", 1000000},
		{"1GiB", 1 << 30},
		{"1GB", 1000000000},
		{"1TiB", 1 << 40},
		{"1.5KiB", 1536},
		{"0.5 MB", 500000},
	} {
		got, err := ParseSize(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestCapacityParseSizeErrors(t *testing.T) {
	for _, tc := range []struct{ in, reason string }{
		{"", "no number"},
		{"banana", "no number"},
		{"KiB", "no number"},
		{"-1KiB", "no number"},
		{"1 bananas", `unknown unit "bananas"`},
		{"1K", `unknown unit "K"`},
		{"1e3", `unknown unit "e3"`},
		{"1.2.3KiB", "malformed number"},
		{".", "malformed number"},
		{"1.1B", "not a whole number of bytes"},
		{"99999999999999999999", "value out of range"},
		{"9000000000GiB", "value out of range"},
		{"9000000000.5GiB", "value out of range"},
	} {
		_, err := ParseSize(tc.in)
		if !errors.Is(err, ErrInvalidSize) {
			t.Errorf("ParseSize(%q): error %v does not match ErrInvalidSize", tc.in, err)
			continue
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "capacity: invalid size: ") || !strings.Contains(msg, tc.reason) {
			t.Errorf("ParseSize(%q) = %q, want it to say %q", tc.in, msg, tc.reason)
		}
	}
}

func TestCapacityDefaultInputsValid(t *testing.T) {
	if err := DefaultInputs().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestCapacityValidateReportsEveryProblem(t *testing.T) {
	in := Inputs{Rate: 0, Peak: math.NaN(), Size: -1, Retention: 0, Replicas: 0, Groups: 0,
		ConsumerRate: -2, Partitions: 0, Outage: -time.Minute, DrainRate: math.Inf(1)}
	err := in.Validate()
	var ie *InputError
	if !errors.As(err, &ie) || !errors.Is(err, ErrInvalidInputs) {
		t.Fatalf("Validate() = %v, want an *InputError matching ErrInvalidInputs", err)
	}
	want := []string{
		"rate: must be > 0, got 0",
		"peak: must be a finite number, got NaN",
		"size: must be > 0 bytes, got -1",
		"retention: must be > 0, got 0s",
		"replicas: must be >= 1, got 0",
		"groups: must be >= 1, got 0",
		"consumer-rate: must be > 0, got -2",
		"partitions: must be >= 1, got 0",
		"outage: must be > 0, got -1m0s",
		"drain-rate: must be a finite number, got +Inf",
	}
	if len(ie.Problems) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%v", len(ie.Problems), len(want), err)
	}
	for i, w := range want {
		if got := ie.Problems[i].String(); got != w {
			t.Errorf("problem %d = %q, want %q", i, got, w)
		}
	}

	in = DefaultInputs()
	in.Peak = 10000
	if err := in.Validate(); err == nil || err.Error() != "capacity: invalid input: peak: must be >= rate (20,000), got 10,000" {
		t.Errorf("peak below rate: %v", err)
	}
}

func TestCapacityComputeWarnings(t *testing.T) {
	p := Compute(DefaultInputs())
	if len(p.Warnings) != 2 || !strings.Contains(strings.Join(p.Warnings, "\n"), "24 partitions allow at most 24 consumers against 50 needed at peak") {
		t.Errorf("default warnings: %q", p.Warnings)
	}

	in := DefaultInputs()
	in.Partitions, in.Outage, in.DrainRate = 64, 100*time.Hour, 20000
	p = Compute(in)
	if p.Figures.DrainSeconds != nil {
		t.Errorf("drain at the arrival rate finishes after %vs", *p.Figures.DrainSeconds)
	}
	got := strings.Join(p.Warnings, "\n")
	for _, s := range []string{"exceeds the 72h retention", "never drains"} {
		if !strings.Contains(got, s) {
			t.Errorf("warnings %q lack %q", p.Warnings, s)
		}
	}
	if strings.Contains(got, "partitions") {
		t.Errorf("64 partitions still warned: %q", p.Warnings)
	}
	if !strings.Contains(p.Notes[0], "128,000/s, enough for the 100,000/s peak, which needs 50") {
		t.Errorf("ceiling note: %q", p.Notes[0])
	}
}

func TestCapacityFormatting(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{num(20000), "20,000"},
		{num(2500.5), "2,500.5"},
		{num(999), "999"},
		{num(-1234567), "-1,234,567"},
		{fixed(4882.8125, 2), "4,882.81"},
		{trim(5, 2), "5"},
		{trim(1.6, 2), "1.6"},
		{sizeLabel(1024), "1 KiB"},
		{sizeLabel(1000), "1,000 B"},
		{sizeLabel(3 << 20), "3 MiB"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
