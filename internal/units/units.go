package units

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "pb": 1e15,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40, "pib": 1 << 50,
}

// ErrSize is what every ParseSize failure wraps.
var ErrSize = errors.New("invalid size")

// ParseSize parses a byte count: a number with an optional unit, with or
// without a space, case-insensitive: 1024, 1KiB, 1 KiB, 1KB (1,000), 10MiB,
// 1.5GB. A fraction is accepted when the result is a whole number of
// bytes. Errors wrap ErrSize and say what was wrong.
func ParseSize(s string) (int64, error) {
	bad := func(reason string) (int64, error) {
		return 0, fmt.Errorf("%w: %s in %q; want a byte count such as 1024, 1KiB, 1 KiB, 1KB or 10MiB", ErrSize, reason, s)
	}
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i < 0 {
		i = len(t)
	}
	number, unit := t[:i], strings.TrimSpace(t[i:])
	if number == "" {
		return bad("no number")
	}
	mult, ok := sizeUnits[strings.ToLower(unit)]
	if !ok {
		return bad("unknown unit " + strconv.Quote(unit))
	}
	if !strings.Contains(number, ".") {
		n, err := strconv.ParseInt(number, 10, 64)
		if err != nil || n > math.MaxInt64/mult {
			return bad("value out of range")
		}
		return n * mult, nil
	}
	v, err := strconv.ParseFloat(number, 64)
	if err != nil {
		return bad("malformed number")
	}
	b := v * float64(mult)
	if b >= math.MaxInt64 {
		return bad("value out of range")
	}
	if b != math.Trunc(b) {
		return bad("not a whole number of bytes")
	}
	return int64(b), nil
}

// ExactSize prints n in the largest binary unit that divides it exactly
// ("10GiB"), or as a plain byte count; ParseSize reads it back.
func ExactSize(n int64) string {
	if n != 0 {
		for _, u := range []struct {
			name string
			size int64
		}{{"PiB", 1 << 50}, {"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
			if n%u.size == 0 {
				return strconv.FormatInt(n/u.size, 10) + u.name
			}
		}
	}
	return strconv.FormatInt(n, 10)
}

// HumanSize prints n approximately for people: "1.2 MiB", "300 B".
func HumanSize(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// ShortDuration prints d without zero trailing units: 72h, 30m, 1h30m.
func ShortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
