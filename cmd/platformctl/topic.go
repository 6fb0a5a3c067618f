package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/internal/cli"
	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/units"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
)

func newTopicCmd(g *globalOptions) *cobra.Command {
	return parentCmd("topic", "Create, list and describe topics (partitioned, retained logs)",
		newTopicCreateCmd(g), newTopicListCmd(g), newTopicDescribeCmd(g))
}

func newTopicCreateCmd(g *globalOptions) *cobra.Command {
	spec := platform.DefaultTopicSpec("")
	var opts catalog.ApplyOptions
	var maxBytes string
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a topic, or update it (idempotent; conflicting changes are refused)",
		Long: `Creates the topic NAME, addressable as NAME.<key> by any NATS client. Running
it again with the same flags changes nothing. A change that would break a
guarantee is refused without applying anything: the partition count is fixed
for a topic's life (changing it moves keys and breaks per-key order), and
lowering replicas below 3 needs --allow-reduced-replicas.`,
		Args: exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			spec.Name = args[0]
			if maxBytes != "" {
				n, err := sizeFlag("--max-bytes", maxBytes)
				if err != nil {
					return err
				}
				spec.Retention.MaxBytes = n
			}
			if err := spec.Validate(); err != nil {
				return cli.UsageError{Err: err}
			}
			return g.apply(cmd, control.SubjTopicApply, control.ApplyTopicRequest{Spec: spec, Options: opts}, opts.DryRun)
		},
	}
	f := cmd.Flags()
	f.IntVar(&spec.Partitions, "partitions", spec.Partitions, "partition count (fixed for the topic's life)")
	f.IntVar(&spec.Replicas, "replicas", spec.Replicas, "replicas of every event")
	f.DurationVar(&spec.Retention.MaxAge, "retention", spec.Retention.MaxAge, "keep events this long (0: no age limit)")
	f.StringVar(&maxBytes, "max-bytes", "", "keep at most this many bytes (e.g. 10GiB)")
	f.StringVar(&spec.Key, "key", "", "what the partition key is, e.g. order:<orderId>")
	f.StringVar(&spec.Owner, "owner", "", "team answerable for the topic and its DLQ")
	f.StringVar(&spec.Residency, "residency", "", "region the topic's data must never leave")
	f.StringVar(&spec.Cleanup, "cleanup", "", "delete (keep every event until retention) or compact (keep the latest event per key; not a full history)")
	f.DurationVar(&spec.TombstoneRetention, "tombstone-retention", 0, "compacted topics: keep a tombstone this long (0: 24h)")
	f.StringVar(&spec.Review, "review", "", "required: moving a group's position (group reset) needs an approved request")
	f.BoolVar(&opts.AllowCleanupChange, "allow-cleanup-change", false, "permit switching an existing topic between delete and compact")
	addApplyFlags(cmd, &opts)
	return cmd
}

func addApplyFlags(cmd *cobra.Command, opts *catalog.ApplyOptions) {
	cmd.Flags().BoolVar(&opts.AllowReducedReplicas, "allow-reduced-replicas", false, "permit lowering replicas below 3")
	cmd.Flags().BoolVar(&opts.DryRun, "dry-run", false, "show the change without applying it")
}

// apply sends one apply request to the control API and prints the change
// it reports.
func (g *globalOptions) apply(cmd *cobra.Command, subject string, req any, dry bool) error {
	var ch catalog.Change
	if err := g.call(cmd.Context(), subject, req, &ch); err != nil {
		return err
	}
	return writeChange(cmd.OutOrStdout(), ch, dry)
}

func writeChange(w io.Writer, ch catalog.Change, dry bool) error {
	prefix := ""
	if dry {
		prefix = "dry run: would "
	}
	switch ch.Action {
	case catalog.ActionUnchanged:
		fmt.Fprintf(w, "%s %s: unchanged\n", ch.Kind, ch.Name)
	default:
		fmt.Fprintf(w, "%s%s %s %s\n", prefix, ch.Action, ch.Kind, ch.Name)
	}
	for _, d := range ch.Details {
		fmt.Fprintf(w, "  %s\n", d)
	}
	return nil
}

func newTopicListCmd(g *globalOptions) *cobra.Command {
	return listCmd(g, "list", "List topics", control.SubjTopicList, writeTopics)
}

func writeTopics(w io.Writer, topics []catalog.TopicInfo) error {
	return writeTable(w, "TOPIC\tPARTITIONS\tREPLICAS\tRETENTION\tMESSAGES\tBYTES\tLEADER\tOWNER\tRESIDENCY", topics, func(w io.Writer, t catalog.TopicInfo) {
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", t.Spec.Name, t.Spec.Partitions,
			replicaHealth(t.Stream.Cluster, t.Spec.Replicas), retention(t.Spec.Retention), t.Stream.Messages,
			units.HumanSize(t.Stream.Bytes), orDash(t.Stream.Cluster.Leader), orDash(t.Spec.Owner), orDash(t.Spec.Residency))
	})
}

func newTopicDescribeCmd(g *globalOptions) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "describe NAME",
		Short: "Per-partition message counts and, per group, pending events and the age of the oldest unprocessed one",
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var st catalog.TopicStatus
			if err := g.call(cmd.Context(), control.SubjTopicDescribe, control.NameRequest{Name: args[0]}, &st); err != nil {
				return err
			}
			if output == "json" {
				return writeJSON(cmd.OutOrStdout(), st)
			}
			if err := writeTopicStatus(cmd.OutOrStdout(), st); err != nil {
				return err
			}
			writeTopicMirrors(cmd, g, args[0])
			return nil
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

func writeTopicStatus(w io.Writer, st catalog.TopicStatus) error {
	s := st.Spec
	fmt.Fprintf(w, "Topic %s\n", s.Name)
	fmt.Fprintf(w, "  subject:     %s.<key>   (stored as %s.<partition>.<key>)\n", s.Name, s.Name)
	fmt.Fprintf(w, "  key:         %s\n", orDash(s.Key))
	fmt.Fprintf(w, "  partitions:  %d\n", s.Partitions)
	fmt.Fprintf(w, "  replicas:    %s (leader %s)\n", replicaHealth(st.Stream.Cluster, s.Replicas), orDash(st.Stream.Cluster.Leader))
	fmt.Fprintf(w, "  retention:   %s\n", retention(s.Retention))
	fmt.Fprintf(w, "  owner:       %s\n", orDash(s.Owner))
	fmt.Fprintf(w, "  residency:   %s\n", orDash(s.Residency))
	fmt.Fprintf(w, "  messages:    %d (%s), seq %d..%d\n\n", st.Stream.Messages, units.HumanSize(st.Stream.Bytes), st.Stream.FirstSeq, st.Stream.LastSeq)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "PARTITION\tMESSAGES\t")
	for _, p := range st.Partitions {
		fmt.Fprintf(tw, "%d\t%d\t\n", p.Partition, p.Messages)
	}
	tw.Flush()
	fmt.Fprintln(w)
	if len(st.Groups) == 0 {
		fmt.Fprintln(w, "No consumer groups.")
		return nil
	}
	return writeTable(w, "GROUP\tPENDING\tOLDEST UNPROCESSED\tLAGGING PARTITIONS\tMISSING", st.Groups, func(w io.Writer, gs catalog.GroupStatus) {
		var lagging []string
		for _, p := range gs.Partitions {
			if p.Pending > 0 {
				lagging = append(lagging, fmt.Sprintf("%d(%d)", p.Partition, p.Pending))
			}
		}
		if n := len(lagging); n > maxLaggingShown {
			lagging = append(lagging[:maxLaggingShown], fmt.Sprintf("+%d more", n-maxLaggingShown))
		}
		missing := "-"
		if len(gs.MissingPartitions) > 0 {
			missing = fmt.Sprint(gs.MissingPartitions)
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\n", gs.Name, gs.Pending, age(gs.OldestAge), orDash(strings.Join(lagging, " ")), missing)
	})
}

// maxLaggingShown bounds the partitions listed per group in the table
// (-o json has them all).
const maxLaggingShown = 6

func replicaHealth(c catalog.ClusterStatus, want int) string {
	if len(c.Replicas) == 0 {
		return fmt.Sprintf("%d", want)
	}
	cur := 0
	for _, r := range c.Replicas {
		if r.Current || r.Leader {
			cur++
		}
	}
	return fmt.Sprintf("%d/%d current", cur, want)
}

func retention(r platform.Retention) string {
	var parts []string
	if r.MaxAge > 0 {
		parts = append(parts, r.MaxAge.String())
	}
	if r.MaxBytes > 0 {
		parts = append(parts, units.HumanSize(uint64(r.MaxBytes)))
	}
	if len(parts) == 0 {
		return "unbounded"
	}
	return strings.Join(parts, ", ")
}

func age(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// exactArgs is cobra.ExactArgs with an error that names the arguments and
// maps to exit code 2.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return cli.UsageError{Err: fmt.Errorf("%s: want %s, got %d argument(s)", cmd.CommandPath(), names, len(args))}
		}
		return nil
	}
}
