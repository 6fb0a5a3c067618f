package main

import (
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/msgplatform/platform/internal/capacity"
	"github.com/msgplatform/platform/internal/cli"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/tenancy"
)

func newTenantCmd(g *globalOptions) *cobra.Command {
	return parentCmd("tenant", "Tenants: isolated NATS accounts with quotas, suspend/resume, topics and queues",
		newTenantCreateCmd(g), newTenantListCmd(g), newTenantShowCmd(g), newTenantUpdateCmd(g),
		newTenantStateCmd(g, "suspend", tenancy.SubjTenantSuspend, "Drop and refuse every connection of the tenant; data and configuration are kept"),
		newTenantStateCmd(g, "resume", tenancy.SubjTenantResume, "Let a suspended tenant's users connect again"),
		newTenantDeleteCmd(g), newTenantTopicCmd(g), newTenantQueueCmd(g), newTenantGroupCmd(g),
		newTenantShareCmd(g), newTenantSharesCmd(g))
}

// actor names who runs the command, for the audit log.
func actor() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return "platformctl:" + name + "@" + host
}

// tenantArgs is exactArgs(n, names) for arguments that start with a
// TENANT, and a usage error too when that is not a valid tenant name.
func tenantArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := exactArgs(n, names)(cmd, args); err != nil {
			return err
		}
		return validTenant(args[0])
	}
}

// validTenant is a usage error when name is not a valid tenant name.
func validTenant(name string) error {
	if err := tenancy.ValidateName("tenant", name); err != nil {
		return cli.UsageError{Err: err}
	}
	return nil
}

// quotaFlags binds the quota flags; apply sets only those given.
type quotaFlags struct {
	fs                                     *pflag.FlagSet
	conns, streams, consumers, ackPending  int
	rate                                   int
	payload, bytesRate, r1m, r1d, r3m, r3d string
	policy                                 string
}

func addQuotaFlags(cmd *cobra.Command) *quotaFlags {
	q := &quotaFlags{fs: cmd.Flags()}
	f := cmd.Flags()
	f.IntVar(&q.conns, "connections", 0, "max connections (-1 unlimited)")
	f.IntVar(&q.streams, "streams", 0, "max streams per replica tier (-1 unlimited)")
	f.IntVar(&q.consumers, "consumers", 0, "max consumers per replica tier (-1 unlimited)")
	f.IntVar(&q.ackPending, "max-ack-pending", 0, "max ack pending per consumer (-1 unlimited)")
	f.StringVar(&q.payload, "max-payload", "", "max event size, e.g. 1MiB")
	f.StringVar(&q.r1m, "r1-memory", "", "R1 memory storage, e.g. 1GiB (-1 unlimited)")
	f.StringVar(&q.r1d, "r1-disk", "", "R1 disk storage, e.g. 10GiB (-1 unlimited)")
	f.StringVar(&q.r3m, "r3-memory", "", "R3 memory storage (-1 unlimited)")
	f.StringVar(&q.r3d, "r3-disk", "", "R3 disk storage (-1 unlimited)")
	f.IntVar(&q.rate, "publish-rate", 0, "events/s over the whole cluster (0 unlimited)")
	f.StringVar(&q.bytesRate, "publish-bytes-rate", "", "bytes/s (headers and payload, as stored) over the whole cluster, e.g. 10MiB (0 unlimited)")
	f.StringVar(&q.policy, "policy", "", "over the publish rate: throttle or reject")
	return q
}

func (q *quotaFlags) apply(dst *tenancy.Quota) error {
	set := func(name string) bool { return q.fs.Changed(name) }
	ints := map[string]*int{"connections": &dst.Connections, "streams": &dst.Streams, "consumers": &dst.Consumers,
		"max-ack-pending": &dst.MaxAckPending, "publish-rate": &dst.PublishRate}
	vals := map[string]int{"connections": q.conns, "streams": q.streams, "consumers": q.consumers, "max-ack-pending": q.ackPending, "publish-rate": q.rate}
	for n, p := range ints {
		if set(n) {
			*p = vals[n]
		}
	}
	sizes := map[string]struct {
		v   string
		dst *int64
	}{"max-payload": {q.payload, &dst.MaxPayload}, "publish-bytes-rate": {q.bytesRate, &dst.PublishBytesRate},
		"r1-memory": {q.r1m, &dst.Storage.R1.Memory}, "r1-disk": {q.r1d, &dst.Storage.R1.Disk},
		"r3-memory": {q.r3m, &dst.Storage.R3.Memory}, "r3-disk": {q.r3d, &dst.Storage.R3.Disk}}
	for n, s := range sizes {
		if !set(n) {
			continue
		}
		if strings.TrimSpace(s.v) == "-1" {
			*s.dst = -1
			continue
		}
		v, err := capacity.ParseSize(s.v)
		if err != nil {
			return cli.UsageError{Err: fmt.Errorf("--%s: %w", n, err)}
		}
		*s.dst = v
	}
	if set("policy") {
		dst.Policy = tenancy.Policy(q.policy)
	}
	if err := dst.Validate(); err != nil {
		return cli.UsageError{Err: err}
	}
	return nil
}

func newTenantCreateCmd(g *globalOptions) *cobra.Command {
	var qf *quotaFlags
	cmd := &cobra.Command{
		Use:   "create NAME [quota flags]",
		Short: "Create a tenant (a NATS account signed by the platform) with its quota",
		Args:  tenantArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			spec := tenancy.DefaultSpec(args[0])
			if err := qf.apply(&spec.Quota); err != nil {
				return err
			}
			var t tenancy.Tenant
			if err := g.call(cmd.Context(), tenancy.SubjTenantCreate, tenancy.CreateRequest{Actor: actor(), Spec: spec}, &t); err != nil {
				return err
			}
			return writeJSON(cmd.OutOrStdout(), t)
		},
	}
	qf = addQuotaFlags(cmd)
	return cmd
}

func newTenantUpdateCmd(g *globalOptions) *cobra.Command {
	var qf *quotaFlags
	cmd := &cobra.Command{
		Use:   "update NAME [quota flags]",
		Short: "Change a tenant's quota; it applies to live connections at once",
		Args:  tenantArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			changed := 0
			cmd.LocalFlags().VisitAll(func(f *pflag.Flag) {
				if f.Changed {
					changed++
				}
			})
			if changed == 0 {
				return cli.UsageError{Err: fmt.Errorf("tenant update %s: name at least one quota flag to change (platformctl tenant update --help lists them)", args[0])}
			}
			var cur tenancy.Tenant
			if err := g.call(cmd.Context(), tenancy.SubjTenantShow, tenancy.NameRequest{Name: args[0]}, &cur); err != nil {
				return err
			}
			q := cur.Quota
			if err := qf.apply(&q); err != nil {
				return err
			}
			var t tenancy.Tenant
			if err := g.call(cmd.Context(), tenancy.SubjTenantUpdate, tenancy.UpdateRequest{Actor: actor(), Name: args[0], Quota: q}, &t); err != nil {
				return err
			}
			return writeJSON(cmd.OutOrStdout(), t)
		},
	}
	qf = addQuotaFlags(cmd)
	return cmd
}

func newTenantListCmd(g *globalOptions) *cobra.Command {
	return printCmd(&cobra.Command{
		Use:   "list",
		Short: "List tenants",
		Args:  exactArgs(0, "no arguments"),
	}, g.call, tenancy.SubjTenantList, noRequest, writeTenants)
}

func writeTenants(w io.Writer, ts []tenancy.Tenant) error {
	return writeTable(w, "TENANT\tSTATE\tPUBLISH RATE\tPOLICY\tCONNECTIONS\tTOPICS\tQUEUES\tUSERS\tACCOUNT", ts, func(w io.Writer, t tenancy.Tenant) {
		rate := "unlimited"
		if t.Quota.PublishRate > 0 {
			rate = fmt.Sprintf("%d/s", t.Quota.PublishRate)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", t.Name, t.State, rate, t.Quota.Policy, t.Quota.Connections,
			len(t.Topics), len(t.Queues), len(t.Users), t.Account)
	})
}

func newTenantShowCmd(g *globalOptions) *cobra.Command {
	return printCmd(&cobra.Command{
		Use:   "show NAME",
		Short: "Show a tenant: state, quota, topics, queues, groups and users (JSON)",
		Args:  tenantArgs(1, "NAME"),
	}, g.call, tenancy.SubjTenantShow, func(args []string) (any, error) {
		return tenancy.NameRequest{Name: args[0]}, nil
	}, writeJSON[tenancy.Tenant])
}

func newTenantStateCmd(g *globalOptions, verb, subject, short string) *cobra.Command {
	return printCmd(&cobra.Command{
		Use:   verb + " NAME",
		Short: short,
		Args:  tenantArgs(1, "NAME"),
	}, g.call, subject, func(args []string) (any, error) {
		return tenancy.NameRequest{Actor: actor(), Name: args[0]}, nil
	}, func(w io.Writer, t tenancy.Tenant) error {
		_, err := fmt.Fprintf(w, "tenant %s: %s\n", t.Name, t.State)
		return err
	})
}

func newTenantDeleteCmd(g *globalOptions) *cobra.Command {
	var purge bool
	cmd := &cobra.Command{
		Use:   "delete NAME [--purge]",
		Short: "Delete a tenant; refused while it has topics or queues unless --purge",
		Args:  tenantArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := g.call(cmd.Context(), tenancy.SubjTenantDelete, tenancy.NameRequest{Actor: actor(), Name: args[0], Purge: purge}, nil); err != nil {
				return err
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "tenant %s: deleted\n", args[0])
			return err
		},
	}
	cmd.Flags().BoolVar(&purge, "purge", false, "also delete the tenant's topics and queues with their data")
	return cmd
}

// newTenantApplyCmd is `tenant topic|queue|group TENANT NAME`: it sends
// subject the request request makes from TENANT, NAME and the apply
// flags, and prints the change the platform reports.
func newTenantApplyCmd(g *globalOptions, use, short, subject string, request func(tenant, name string, opts catalog.ApplyOptions) any) *cobra.Command {
	var opts catalog.ApplyOptions
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  tenantArgs(2, "TENANT NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.apply(cmd, subject, request(args[0], args[1], opts), opts.DryRun)
		},
	}
	addApplyFlags(cmd, &opts)
	return cmd
}

func newTenantTopicCmd(g *globalOptions) *cobra.Command {
	spec := platform.DefaultTopicSpec("")
	cmd := newTenantApplyCmd(g, "topic TENANT NAME", "Create or update a topic in the tenant's account (publish to NAME.<key>)", tenancy.SubjTenantTopic,
		func(tenant, name string, opts catalog.ApplyOptions) any {
			spec.Name = name
			return tenancy.TopicRequest{Actor: actor(), Tenant: tenant, Spec: spec, Options: opts}
		})
	cmd.Flags().IntVar(&spec.Partitions, "partitions", spec.Partitions, "partition count (fixed for the topic's life)")
	cmd.Flags().IntVar(&spec.Replicas, "replicas", 0, "replicas (default: the platform's)")
	cmd.Flags().DurationVar(&spec.Retention.MaxAge, "retention", spec.Retention.MaxAge, "keep events this long")
	return cmd
}

func newTenantQueueCmd(g *globalOptions) *cobra.Command {
	spec := platform.DefaultQueueSpec("")
	cmd := newTenantApplyCmd(g, "queue TENANT NAME", "Create or update a work queue in the tenant's account (publish to NAME.>)", tenancy.SubjTenantQueue,
		func(tenant, name string, opts catalog.ApplyOptions) any {
			spec.Name = name
			return tenancy.QueueRequest{Actor: actor(), Tenant: tenant, Spec: spec, Options: opts}
		})
	cmd.Flags().DurationVar(&spec.Lease, "lease", spec.Lease, "lease of a job")
	cmd.Flags().IntVar(&spec.MaxAttempts, "max-attempts", spec.MaxAttempts, "deliveries before the dead-letter queue")
	cmd.Flags().IntVar(&spec.Replicas, "replicas", 0, "replicas (default: the platform's)")
	return cmd
}

func newTenantGroupCmd(g *globalOptions) *cobra.Command {
	var spec platform.GroupSpec
	cmd := newTenantApplyCmd(g, "group TENANT NAME --topic TOPIC", "Create a consumer group on one of the tenant's topics", tenancy.SubjTenantGroup,
		func(tenant, name string, opts catalog.ApplyOptions) any {
			spec.Name = name
			return tenancy.GroupRequest{Actor: actor(), Tenant: tenant, Spec: spec, Options: opts}
		})
	cmd.Flags().StringVar(&spec.Topic, "topic", "", "the tenant's topic the group reads")
	return cmd
}
