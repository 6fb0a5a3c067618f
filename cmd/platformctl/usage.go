package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/tenancy"
)

func newUsageCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "usage [TENANT]",
		Short: "Per-tenant usage, cluster-wide: events and bytes in and out, storage against quota, connections, throttled, rejected and dropped publishes",
		Long: `Per tenant, totals over the whole cluster (every daemon's ingest counters
since it started, every node's connections and deliveries): events and bytes
in and out, storage against quota, connections, publishes throttled (delayed),
rejected (refused with an error the publisher saw) and dropped (fire-and-forget
publishes, e.g. nats pub, lost to the rate quota: NATS has no way to slow a
publisher that waits for nothing, so each loss is counted here).

With a node down (or too slow to answer), its connections and what it
delivered to them are missing from the figures: a line on stderr says so
for each tenant concerned (and the metric platform_tenant_usage_partial is
1).`,
		Args: cobra.MaximumNArgs(1),
	}
	return printCmd(cmd, g.call, tenancy.SubjUsage, optionalTenant, func(w io.Writer, us []tenancy.Usage) error {
		if err := writeTable(w, "TENANT\tSTATE\tEVENTS IN\tBYTES IN\tMSGS OUT\tBYTES OUT\tTHROTTLED\tREJECTED\tDROPPED\tAUTH DENIED\tCONNECTIONS\tR1 DISK\tR3 DISK", us, func(w io.Writer, u tenancy.Usage) {
			fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%d\t%s\t%d\t%d\t%d\t%d\t%d/%s\t%s\t%s\n", u.Tenant, u.State, u.MsgsIn, size(int64(u.BytesIn)),
				u.MsgsOut, size(u.BytesOut), u.Throttled, u.Rejected, u.Dropped, u.Denied, u.Connections, limit(int64(u.ConnQuota), false),
				tier(u.Storage["R1"]), tier(u.Storage["R3"]))
		}); err != nil {
			return err
		}
		for _, u := range us {
			if u.Partial != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "usage: %s: partial figures: %s\n", u.Tenant, u.Partial)
			}
		}
		return nil
	})
}

func size(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	f, u := float64(n), 0
	for f >= unit && u < 4 {
		f /= unit
		u++
	}
	return fmt.Sprintf("%.1f%s", f, []string{"B", "KiB", "MiB", "GiB", "TiB"}[u])
}

func limit(n int64, bytes bool) string {
	if n < 0 {
		return "unlimited"
	}
	if bytes {
		return size(n)
	}
	return fmt.Sprint(n)
}

func tier(t tenancy.TierUsage) string {
	return size(int64(t.Disk)) + "/" + limit(t.DiskQuota, true)
}

// optionalTenant is the request of a command taking an optional TENANT
// argument (all tenants without it).
func optionalTenant(args []string) (any, error) {
	var req tenancy.NameRequest
	if len(args) == 1 {
		if err := validTenant(args[0]); err != nil {
			return nil, err
		}
		req.Name = args[0]
	}
	return req, nil
}
