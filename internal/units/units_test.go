package units

import (
	"errors"
	"testing"
	"time"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"1024": 1024, "1KiB": 1024, "1 KiB": 1024, "1kib": 1024, "1KB": 1000, "10MiB": 10 << 20,
		"1.5KiB": 1536, "2GB": 2e9, "1TiB": 1 << 40, " 7 b ": 7,
		"0": 0, "1048576": 1 << 20, "10 GiB": 10 << 30, "500MB": 500e6, "1PiB": 1 << 50,
	} {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "banana", "1 XB", "0.5B", "99999999999999999999", "1.2.3KiB",
		"GiB", "10G", "10 gigs", "1.3B", "9999999PiB", "1..5KiB", "0x10", "-1"} {
		if _, err := ParseSize(in); !errors.Is(err, ErrSize) {
			t.Errorf("ParseSize(%q): err = %v, want ErrSize", in, err)
		}
	}
}

func TestFormatRoundTrip(t *testing.T) {
	for _, n := range []int64{0, 1, 1000, 1024, 10 << 30, 3 << 20, 1536} {
		got, err := ParseSize(ExactSize(n))
		if err != nil || got != n {
			t.Errorf("ParseSize(ExactSize(%d)=%q) = %d, %v", n, ExactSize(n), got, err)
		}
	}
	if got := ShortDuration(72 * time.Hour); got != "72h" {
		t.Errorf("ShortDuration(72h) = %q", got)
	}
	if got := ShortDuration(90 * time.Minute); got != "1h30m" {
		t.Errorf("ShortDuration(90m) = %q", got)
	}
	if got := HumanSize(1228800); got != "1.2 MiB" {
		t.Errorf("HumanSize = %q", got)
	}
}
