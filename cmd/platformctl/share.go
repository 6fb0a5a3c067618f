package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/internal/cli"
	"github.com/msgplatform/platform/tenancy"
)

func newTenantShareCmd(g *globalOptions) *cobra.Command {
	var from, to string
	var revoke bool
	cmd := &cobra.Command{
		Use:   "share TOPIC --from OWNER --to READER [--revoke]",
		Short: "Let another tenant read a topic (a private stream export/import), or stop it with --revoke",
		Long: `Shares topic TOPIC of tenant OWNER with tenant READER: READER's account
imports OWNER's events (stamped Platform-Tenant: OWNER) live on
shared.OWNER.TOPIC.<key>; give its users --sub OWNER/TOPIC. No other
tenant can read it. --revoke stops it at once. Both changes are audited.`,
		Args: exactArgs(1, "TOPIC"),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, f := range []struct{ flag, v, what string }{{"--from", from, "the tenant owning the topic"}, {"--to", to, "the tenant that may read it"}} {
				if f.v == "" {
					return cli.UsageError{Err: fmt.Errorf("%s: required: name %s", f.flag, f.what)}
				}
			}
			for flag, v := range map[string]string{"--from": from, "--to": to} {
				if err := tenancy.ValidateName("tenant", v); err != nil {
					return cli.UsageError{Err: fmt.Errorf("%s: %w", flag, err)}
				}
			}
			var sh tenancy.Share
			req := tenancy.ShareRequest{Actor: actor(), From: from, To: to, Topic: args[0], Revoke: revoke}
			if err := g.call(cmd.Context(), tenancy.SubjTenantShare, req, &sh); err != nil {
				return err
			}
			if revoke {
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "topic %s of %s: no longer shared with %s\n", sh.Topic, sh.From, sh.To)
				return err
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "topic %s of %s: shared with %s on %s (users: --sub %s/%s)\n",
				sh.Topic, sh.From, sh.To, tenancy.SharedSubject(sh.From, sh.Topic), sh.From, sh.Topic)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&from, "from", "", "owner tenant of the topic")
	f.StringVar(&to, "to", "", "tenant that may read it")
	f.BoolVar(&revoke, "revoke", false, "stop sharing")
	return cmd
}

func newTenantSharesCmd(g *globalOptions) *cobra.Command {
	return printCmd(&cobra.Command{
		Use:   "shares [TENANT]",
		Short: "List topics shared between tenants (of TENANT, as owner or reader, or all)",
		Args:  cobra.MaximumNArgs(1),
	}, g.call, tenancy.SubjTenantShares, optionalTenant, func(w io.Writer, ls []tenancy.Share) error {
		return writeTable(w, "OWNER\tTOPIC\tREADER\tSUBJECT\tSINCE", ls, func(w io.Writer, s tenancy.Share) {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", s.From, s.Topic, s.To, tenancy.SharedSubject(s.From, s.Topic), s.Created.Format(time.RFC3339))
		})
	})
}
