package capacity

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/msgplatform/platform/internal/units"
)

// Errors returned by this package; match them with errors.Is.
var (
	// ErrInvalidInputs is matched by every error [Inputs.Validate] returns.
	ErrInvalidInputs = errors.New("capacity: invalid inputs")
	// ErrInvalidSize is matched by every error [ParseSize] returns.
	ErrInvalidSize = errors.New("capacity: invalid size")
)

// PeakWindow is the length of the promotion burst the plan sizes (the
// guide's "ten-minute peak").
const PeakWindow = 10 * time.Minute

// Byte units used when printing.
const (
	kib = 1 << 10
	mib = 1 << 20
	gib = 1 << 30
	tib = 1 << 40
	tb  = 1e12
)

// Inputs are the planning inputs of a capacity plan.
type Inputs struct {
	Rate         float64       // average publish rate, events/s
	Peak         float64       // peak publish rate, events/s
	Size         int64         // average event size, bytes
	Retention    time.Duration // how long the log keeps events
	Replicas     int           // replication factor
	Groups       int           // consumer groups reading every event
	ConsumerRate float64       // events/s one consumer handles (hypothetical until measured)
	Partitions   int           // partitions of the topic
	Outage       time.Duration // consumer outage to absorb (default 30m)
	DrainRate    float64       // events/s the groups reach when catching up (default 50,000)
}

// DefaultInputs returns the HarborCart planning inputs of the design guide.
func DefaultInputs() Inputs {
	return Inputs{
		Rate:         20000,
		Peak:         100000,
		Size:         1024,
		Retention:    72 * time.Hour,
		Replicas:     3,
		Groups:       3,
		ConsumerRate: 2000,
		Partitions:   24,
		Outage:       30 * time.Minute,
		DrainRate:    50000,
	}
}

// Problem is one invalid input, named by its platformctl flag.
type Problem struct {
	Field string // flag name: rate, peak, size, ...
	Msg   string // what is wrong, ending with the value given
}

func (p Problem) String() string { return p.Field + ": " + p.Msg }

// InputError lists every problem of a set of inputs. It matches
// [ErrInvalidInputs].
type InputError struct{ Problems []Problem }

func (e *InputError) Error() string {
	if len(e.Problems) == 1 {
		return "capacity: invalid input: " + e.Problems[0].String()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "capacity: %d invalid inputs:", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  " + p.String())
	}
	return b.String()
}

// Is reports whether target is [ErrInvalidInputs].
func (e *InputError) Is(target error) bool { return target == ErrInvalidInputs }

// Validate reports every problem of in at once as an [*InputError], or nil.
func (in Inputs) Validate() error {
	var ps []Problem
	add := func(field, format string, args ...any) {
		ps = append(ps, Problem{field, fmt.Sprintf(format, args...)})
	}
	rate := func(field string, v float64) bool {
		switch {
		case math.IsNaN(v) || math.IsInf(v, 0):
			add(field, "must be a finite number, got %v", v)
		case v <= 0:
			add(field, "must be > 0, got %v", v)
		default:
			return true
		}
		return false
	}
	atLeastOne := func(field string, v int) {
		if v < 1 {
			add(field, "must be >= 1, got %d", v)
		}
	}
	positive := func(field string, d time.Duration) {
		if d <= 0 {
			add(field, "must be > 0, got %v", d)
		}
	}
	rateOK := rate("rate", in.Rate)
	if rate("peak", in.Peak) && rateOK && in.Peak < in.Rate {
		add("peak", "must be >= rate (%s), got %s", num(in.Rate), num(in.Peak))
	}
	if in.Size <= 0 {
		add("size", "must be > 0 bytes, got %d", in.Size)
	}
	positive("retention", in.Retention)
	atLeastOne("replicas", in.Replicas)
	atLeastOne("groups", in.Groups)
	rate("consumer-rate", in.ConsumerRate)
	atLeastOne("partitions", in.Partitions)
	positive("outage", in.Outage)
	rate("drain-rate", in.DrainRate)
	if len(ps) > 0 {
		return &InputError{Problems: ps}
	}
	return nil
}

// Row is one line of the capacity table, worded and formatted as the guide.
type Row struct {
	Quantity    string `json:"quantity"`
	Computation string `json:"computation"`
	Result      string `json:"result"`
}

// Figures are the unrounded numbers behind the table. Keys with "bytes"
// scale with the event size; the others do not.
type Figures struct {
	AvgIngestBytesPerSec   float64  `json:"avg_ingest_bytes_per_sec"`
	PeakIngestBytesPerSec  float64  `json:"peak_ingest_bytes_per_sec"`
	PeakFactor             float64  `json:"peak_factor"`
	DailyBytes             float64  `json:"daily_bytes"`
	RetainedBytes          float64  `json:"retained_bytes"`
	ReplicatedBytes        float64  `json:"replicated_bytes"`
	DeliveriesAvgPerSec    float64  `json:"deliveries_avg_per_sec"`
	DeliveriesPeakPerSec   float64  `json:"deliveries_peak_per_sec"`
	FollowerBytesPerSec    float64  `json:"follower_bytes_per_sec"`
	FetchBytesPerSec       float64  `json:"fetch_bytes_per_sec"`
	EgressAvgBytesPerSec   float64  `json:"egress_avg_bytes_per_sec"`
	EgressPeakBytesPerSec  float64  `json:"egress_peak_bytes_per_sec"`
	ConsumersAvgPerGroup   int      `json:"consumers_avg_per_group"`
	ConsumersAvgTotal      int      `json:"consumers_avg_total"`
	ConsumersPeakPerGroup  int      `json:"consumers_peak_per_group"`
	PartitionCeilingPerSec float64  `json:"partition_ceiling_per_sec"`
	PartitionsNeededAtPeak int      `json:"partitions_needed_at_peak"`
	BurstEvents            float64  `json:"burst_events"`
	BurstBytes             float64  `json:"burst_bytes"`
	BurstExtraEvents       float64  `json:"burst_extra_events"`
	BurstExtraBytes        float64  `json:"burst_extra_bytes"`
	OutageEvents           float64  `json:"outage_events"`
	OutageBytes            float64  `json:"outage_bytes"`
	DrainSeconds           *float64 `json:"drain_seconds"` // nil: the backlog never drains
}

// Plan is the capacity table for one set of inputs.
type Plan struct {
	Inputs   Inputs   `json:"-"`
	Rows     []Row    `json:"rows"`
	Figures  Figures  `json:"figures"`
	Notes    []string `json:"notes"`    // partition ceiling and outage lines
	Warnings []string `json:"warnings"` // constraints the inputs break
}

// Compute builds the plan for in, which must have passed [Inputs.Validate];
// otherwise figures may be infinite or NaN.
func Compute(in Inputs) Plan {
	size := float64(in.Size)
	f := Figures{
		AvgIngestBytesPerSec:  in.Rate * size,
		PeakIngestBytesPerSec: in.Peak * size,
		PeakFactor:            in.Peak / in.Rate,
	}
	f.DailyBytes = f.AvgIngestBytesPerSec * 86400
	f.RetainedBytes = f.AvgIngestBytesPerSec * in.Retention.Seconds()
	f.ReplicatedBytes = f.RetainedBytes * float64(in.Replicas)
	f.DeliveriesAvgPerSec = float64(in.Groups) * in.Rate
	f.DeliveriesPeakPerSec = float64(in.Groups) * in.Peak
	f.FollowerBytesPerSec = float64(in.Replicas-1) * f.AvgIngestBytesPerSec
	f.FetchBytesPerSec = float64(in.Groups) * f.AvgIngestBytesPerSec
	f.EgressAvgBytesPerSec = f.FollowerBytesPerSec + f.FetchBytesPerSec
	f.EgressPeakBytesPerSec = float64(in.Replicas-1+in.Groups) * f.PeakIngestBytesPerSec
	f.ConsumersAvgPerGroup = ceilDiv(in.Rate, in.ConsumerRate)
	f.ConsumersAvgTotal = f.ConsumersAvgPerGroup * in.Groups
	f.ConsumersPeakPerGroup = ceilDiv(in.Peak, in.ConsumerRate)
	f.PartitionCeilingPerSec = float64(in.Partitions) * in.ConsumerRate
	f.PartitionsNeededAtPeak = f.ConsumersPeakPerGroup
	window := PeakWindow.Seconds()
	f.BurstEvents = in.Peak * window
	f.BurstBytes = f.BurstEvents * size
	f.BurstExtraEvents = (in.Peak - in.Rate) * window
	f.BurstExtraBytes = f.BurstExtraEvents * size
	f.OutageEvents = in.Rate * in.Outage.Seconds()
	f.OutageBytes = f.OutageEvents * size
	if in.DrainRate > in.Rate {
		s := f.OutageEvents / (in.DrainRate - in.Rate)
		f.DrainSeconds = &s
	}

	factor := trim(f.PeakFactor, 2) + "×"
	days := trim(in.Retention.Hours()/24, 3)
	dayWord := days + " days"
	if days == "1" {
		dayWord = "1 day"
	}
	groupWord := fmt.Sprintf("%d groups", in.Groups)
	if in.Groups == 1 {
		groupWord = "1 group"
	}
	dailyTiB := fixed(f.DailyBytes/tib, 3)
	retainedTiB := fixed(f.RetainedBytes/tib, 2)
	egressAvg := fixed(f.EgressAvgBytesPerSec/mib, 2)
	sizeB := num(size)
	hypo := " (hypothetical)"
	p := Plan{Inputs: in, Figures: f, Warnings: []string{}}
	p.Rows = []Row{
		{"Average ingest", num(in.Rate) + " events/s × " + sizeLabel(in.Size), fixed(f.AvgIngestBytesPerSec/mib, 2) + " MiB/s"},
		{"Peak ingest (" + factor + ")", num(in.Peak) + " events/s × " + sizeLabel(in.Size), fixed(f.PeakIngestBytesPerSec/mib, 2) + " MiB/s"},
		{"Per day at average", num(in.Rate) + " × " + sizeB + " B × 86,400 s", fixed(f.DailyBytes/tb, 3) + " TB decimal, " + dailyTiB + " TiB"},
		{dayWord + " at average, logical", days + " × " + dailyTiB + " TiB", retainedTiB + " TiB"},
		{dayWord + " with replication factor " + strconv.Itoa(in.Replicas), retainedTiB + " TiB × " + strconv.Itoa(in.Replicas),
			fixed(f.ReplicatedBytes/tib, 2) + " TiB, excluding indexes, overhead and headroom"},
		{"Group deliveries (" + groupWord + ")", strconv.Itoa(in.Groups) + " × " + num(in.Rate) + "/s",
			num(f.DeliveriesAvgPerSec) + "/s average, " + num(f.DeliveriesPeakPerSec) + "/s at peak"},
		{"Broker egress, average", fixed(f.FollowerBytesPerSec/mib, 2) + " follower replication + " + fixed(f.FetchBytesPerSec/mib, 2) + " consumer fetch",
			"about " + egressAvg + " MiB/s"},
		{"Broker egress, peak (" + factor + ")", egressAvg + " × " + trim(f.PeakFactor, 2),
			"about " + fixed(f.EgressPeakBytesPerSec/mib, 2) + " MiB/s, before protocol overhead, compression and batching"},
		{"Consumers per group, average", num(in.Rate) + " ÷ " + num(in.ConsumerRate) + hypo,
			fmt.Sprintf("%d per group, %d total", f.ConsumersAvgPerGroup, f.ConsumersAvgTotal)},
		{"Consumers per group, peak", num(in.Peak) + " ÷ " + num(in.ConsumerRate) + hypo,
			fmt.Sprintf("%d per group; %d partitions allow at most %d", f.ConsumersPeakPerGroup, in.Partitions, in.Partitions)},
		{"Ten-minute peak, gross", num(in.Peak) + " × " + sizeB + " × " + num(window),
			fixed(f.BurstBytes/gib, 2) + " GiB (" + num(f.BurstEvents) + " events)"},
		{"Ten-minute peak, above baseline", num(in.Peak-in.Rate) + " × " + sizeB + " × " + num(window),
			fixed(f.BurstExtraBytes/gib, 2) + " GiB (" + num(f.BurstExtraEvents) + " extra events)"},
	}

	// Partition ceiling: each group reads every event, so one group's
	// throughput is capped at partitions × per-consumer rate.
	ceiling := fmt.Sprintf("Partition ceiling: %d partitions cap a group at %d active consumers and %s/s",
		in.Partitions, in.Partitions, num(f.PartitionCeilingPerSec))
	if f.PartitionCeilingPerSec >= in.Peak {
		ceiling += fmt.Sprintf(", enough for the %s/s peak, which needs %d", num(in.Peak), f.PartitionsNeededAtPeak)
	} else {
		double := 2 * f.PartitionCeilingPerSec
		verdict := "still below"
		if double >= in.Peak {
			verdict = "enough for"
		}
		ceiling += fmt.Sprintf("; %d partitions would reach %s/s, %s the %s/s peak; the peak needs %d partitions or faster consumers",
			2*in.Partitions, num(double), verdict, num(in.Peak), f.PartitionsNeededAtPeak)
		p.Warnings = append(p.Warnings, fmt.Sprintf("%d partitions × %s/s = %s/s < %s/s peak; lag builds during the peak",
			in.Partitions, num(in.ConsumerRate), num(f.PartitionCeilingPerSec), num(in.Peak)))
	}
	if f.ConsumersPeakPerGroup > in.Partitions {
		p.Warnings = append(p.Warnings, fmt.Sprintf("%d partitions allow at most %d consumers against %d needed at peak",
			in.Partitions, in.Partitions, f.ConsumersPeakPerGroup))
	}
	if f.ConsumersAvgPerGroup > in.Partitions {
		p.Warnings = append(p.Warnings, fmt.Sprintf("%d partitions allow at most %d consumers against %d needed at average; lag grows even at the average rate",
			in.Partitions, in.Partitions, f.ConsumersAvgPerGroup))
	}

	outage := fmt.Sprintf("Outage of %s at average: %s GiB, %s events, ", units.ShortDuration(in.Outage),
		fixed(f.OutageBytes/gib, 2), num(f.OutageEvents))
	if in.Outage <= in.Retention {
		outage += "inside the " + units.ShortDuration(in.Retention) + " retention"
	} else {
		outage += "beyond the " + units.ShortDuration(in.Retention) + " retention"
		p.Warnings = append(p.Warnings, fmt.Sprintf("a %s outage exceeds the %s retention; the oldest unread events are deleted before consumers return",
			units.ShortDuration(in.Outage), units.ShortDuration(in.Retention)))
	}
	outage += fmt.Sprintf("; draining at %s/s against %s/s arriving ", num(in.DrainRate), num(in.Rate))
	if f.DrainSeconds != nil {
		outage += "takes " + time.Duration(math.Round(*f.DrainSeconds)*float64(time.Second)).String()
	} else {
		outage += "never catches up"
		p.Warnings = append(p.Warnings, fmt.Sprintf("drain rate %s/s does not exceed the %s/s arrival rate; the outage backlog never drains",
			num(in.DrainRate), num(in.Rate)))
	}
	p.Notes = []string{ceiling, outage}
	return p
}

// ParseSize parses a byte count: a number with an optional unit, with or
// without a space: 1024, 1KiB, 1 KiB, 1KB (1,000), 10MiB, 1MB, 1GiB, 1GB
// (see units.ParseSize). Errors are *SizeError.
func ParseSize(s string) (int64, error) {
	n, err := units.ParseSize(s)
	if err != nil {
		return 0, &SizeError{Input: s, Reason: strings.TrimPrefix(err.Error(), units.ErrSize.Error()+": ")}
	}
	return n, nil
}

// SizeError is the error of [ParseSize]; it matches [ErrInvalidSize].
type SizeError struct {
	Input  string // the text given
	Reason string // what is wrong with it
}

func (e *SizeError) Error() string { return "capacity: invalid size: " + e.Msg() }

// Msg describes the problem without the package prefix, for a [Problem].
func (e *SizeError) Msg() string { return e.Reason }

// Is reports whether target is [ErrInvalidSize].
func (e *SizeError) Is(target error) bool { return target == ErrInvalidSize }

// ceilDiv returns the whole number of units of per needed to cover total,
// tolerating float noise (20,000 ÷ 2,000 is 10, not 11).
func ceilDiv(total, per float64) int {
	return int(math.Ceil(total/per - 1e-9))
}

// sizeLabel prints a size in the largest binary unit dividing it exactly
// ("1 KiB", "10 KiB"), else in bytes ("1,000 B").
func sizeLabel(n int64) string {
	for _, u := range []struct {
		div  int64
		name string
	}{{gib, "GiB"}, {mib, "MiB"}, {kib, "KiB"}} {
		if n%u.div == 0 {
			return num(float64(n/u.div)) + " " + u.name
		}
	}
	return num(float64(n)) + " B"
}

// fixed prints v with dec decimals and thousands separators: 4,882.81.
func fixed(v float64, dec int) string {
	return group(strconv.FormatFloat(v, 'f', dec, 64))
}

// trim prints v with at most dec decimals, dropping trailing zeros: 5, 2.5.
func trim(v float64, dec int) string {
	s := strconv.FormatFloat(v, 'f', dec, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return group(s)
}

// num prints a count or rate with thousands separators: 20,000, 2,500.5.
func num(v float64) string { return trim(v, 2) }

// group inserts thousands separators into the integer part of a decimal.
func group(s string) string {
	sign := ""
	if strings.HasPrefix(s, "-") {
		sign, s = "-", s[1:]
	}
	intPart, frac, _ := strings.Cut(s, ".")
	var b strings.Builder
	for i, r := range intPart {
		if i > 0 && (len(intPart)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if frac != "" {
		return sign + b.String() + "." + frac
	}
	return sign + b.String()
}
