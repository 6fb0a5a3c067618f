package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/internal/capacity"
	"github.com/msgplatform/platform/internal/cli"
)

// capacityOptions are the flags of platformctl capacity.
type capacityOptions struct {
	in     capacity.Inputs
	size   string
	output string
}

func newCapacityCmd() *cobra.Command {
	o := &capacityOptions{in: capacity.DefaultInputs()}
	cmd := &cobra.Command{
		Use:   "capacity",
		Short: "Print the capacity plan (bandwidth, storage, partitions, outage drain) for a load",
		Long: `Print the capacity table of the design guide for a load: ingest bandwidth,
daily and retained storage with replication, group deliveries, broker egress,
consumers per group against the partition count, the ten-minute peak burst,
and the backlog of a consumer outage with the time to drain it.

The defaults are the HarborCart planning inputs. The figures are arithmetic,
not measurements: the per-consumer rate in particular must be measured.`,
		Example: `  platformctl capacity
  platformctl capacity --size 10KiB
  platformctl capacity --partitions 64 --consumer-rate 2500 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.OutOrStdout())
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return cli.UsageError{Err: err} })
	f := cmd.Flags()
	d := o.in
	f.Float64Var(&o.in.Rate, "rate", d.Rate, "average publish rate, events/s")
	f.Float64Var(&o.in.Peak, "peak", d.Peak, "peak publish rate, events/s")
	f.StringVar(&o.size, "size", fmt.Sprint(d.Size), "average event size: bytes, or with a unit (1KiB, 1 KiB, 1KB = 1000, 10MiB)")
	f.DurationVar(&o.in.Retention, "retention", d.Retention, "log retention")
	f.IntVar(&o.in.Replicas, "replicas", d.Replicas, "replication factor")
	f.IntVar(&o.in.Groups, "groups", d.Groups, "consumer groups reading every event")
	f.Float64Var(&o.in.ConsumerRate, "consumer-rate", d.ConsumerRate, "events/s one consumer handles (hypothetical until measured)")
	f.IntVar(&o.in.Partitions, "partitions", d.Partitions, "partitions of the topic")
	f.DurationVar(&o.in.Outage, "outage", d.Outage, "consumer outage to absorb")
	f.Float64Var(&o.in.DrainRate, "drain-rate", d.DrainRate, "events/s the groups reach when catching up after an outage")
	f.StringVarP(&o.output, "output", "o", "table", "output format: table or json")
	return cmd
}

func (o *capacityOptions) run(w io.Writer) error {
	if err := o.resolve(); err != nil {
		return cli.UsageError{Err: err}
	}
	plan := capacity.Compute(o.in)
	if o.output == "json" {
		return writeCapacityJSON(w, plan)
	}
	return writeCapacityTable(w, plan)
}

// resolve parses --size and checks every input, returning one
// *capacity.InputError that lists every problem, in flag order.
func (o *capacityOptions) resolve() error {
	size, sizeErr := capacity.ParseSize(o.size)
	o.in.Size = size // 0 on error, so Validate reports size in its place
	var problems []capacity.Problem
	if err := o.in.Validate(); err != nil {
		var ie *capacity.InputError
		if !errors.As(err, &ie) {
			return err
		}
		problems = ie.Problems
	}
	var se *capacity.SizeError
	if errors.As(sizeErr, &se) {
		for i := range problems {
			if problems[i].Field == "size" {
				problems[i].Msg = se.Msg()
			}
		}
	}
	if o.output != "table" && o.output != "json" {
		problems = append(problems, capacity.Problem{Field: "output", Msg: fmt.Sprintf("must be table or json, got %q", o.output)})
	}
	if len(problems) > 0 {
		return &capacity.InputError{Problems: problems}
	}
	return nil
}

// writeCapacityTable prints the rows as an aligned markdown table, then the
// notes and one WARNING line per warning.
func writeCapacityTable(w io.Writer, p capacity.Plan) error {
	cells := [][3]string{{"Quantity", "Computation", "Result"}}
	for _, r := range p.Rows {
		cells = append(cells, [3]string{r.Quantity, r.Computation, r.Result})
	}
	var width [3]int
	for _, row := range cells {
		for i, c := range row {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	line := func(row [3]string) {
		for i, c := range row {
			b.WriteString("| " + c + strings.Repeat(" ", width[i]-utf8.RuneCountInString(c)) + " ")
		}
		b.WriteString("|\n")
	}
	line(cells[0])
	for i := range width {
		b.WriteString("|" + strings.Repeat("-", width[i]+2))
	}
	b.WriteString("|\n")
	for _, row := range cells[1:] {
		line(row)
	}
	b.WriteString("\n")
	for _, n := range p.Notes {
		b.WriteString(n + "\n")
	}
	for _, warn := range p.Warnings {
		b.WriteString("WARNING: " + warn + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// capacityJSON is the -o json document: the inputs, the rows as printed, the
// unrounded figures (one key per figure, units in the key), notes and
// warnings.
type capacityJSON struct {
	Inputs struct {
		Rate         float64 `json:"rate"`
		Peak         float64 `json:"peak"`
		SizeBytes    int64   `json:"size_bytes"`
		Retention    string  `json:"retention"`
		Replicas     int     `json:"replicas"`
		Groups       int     `json:"groups"`
		ConsumerRate float64 `json:"consumer_rate"`
		Partitions   int     `json:"partitions"`
		Outage       string  `json:"outage"`
		DrainRate    float64 `json:"drain_rate"`
	} `json:"inputs"`
	capacity.Plan
}

func writeCapacityJSON(w io.Writer, p capacity.Plan) error {
	doc := capacityJSON{Plan: p}
	in := p.Inputs
	doc.Inputs.Rate, doc.Inputs.Peak, doc.Inputs.SizeBytes = in.Rate, in.Peak, in.Size
	doc.Inputs.Retention, doc.Inputs.Replicas, doc.Inputs.Groups = in.Retention.String(), in.Replicas, in.Groups
	doc.Inputs.ConsumerRate, doc.Inputs.Partitions = in.ConsumerRate, in.Partitions
	doc.Inputs.Outage, doc.Inputs.DrainRate = in.Outage.String(), in.DrainRate
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(doc)
}
