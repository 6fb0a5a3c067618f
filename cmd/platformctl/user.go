package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/internal/cli"
	"github.com/msgplatform/platform/tenancy"
)

func newUserCmd(g *globalOptions) *cobra.Command {
	return parentCmd("user", "Tenant users: credentials with publish/read permissions on named topics, queues and groups",
		newUserAddCmd(g), newUserListCmd(g), newUserRevokeCmd(g), newUserUpdateCmd(g), newUserRoleCmd(g))
}

func newUserAddCmd(g *globalOptions) *cobra.Command {
	var spec tenancy.UserSpec
	var out, natsCtx string
	var force bool
	cmd := &cobra.Command{
		Use:   "add TENANT NAME --pub NAMES --sub NAMES --out FILE [--nats-context NAME]",
		Short: "Add a user and write its .creds file (0600), usable by the nats CLI and nats.go",
		Long: `Adds user NAME to TENANT. --pub names topics and queues it may publish to
(through the platform's ingest, under the tenant's publish-rate quota); --sub
names topics, queues and groups it may read. Nothing else is allowed. Clients
must use the inbox prefix _INBOX_<NAME> (nats --inbox-prefix, or
nats.CustomInboxPrefix) so that no user can read another's replies.

--nats-context NAME also saves a nats CLI context with --server, the creds
file and the inbox prefix, so that 'nats --context NAME ...' (requests and
'pub --jetstream' included) works as the user. Against a platform with TLS
on its client port the context names the --tls-ca file too, and
--tls-cert/--tls-key when given (where the port verifies client
certificates, give the user's own certificate there).`,
		Args: tenantUserArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			spec.Name = args[1]
			if out == "" {
				return cli.UsageError{Err: errors.New("--out FILE is required: where to write the credentials")}
			}
			if _, err := os.Stat(out); err == nil && !force {
				return cli.UsageError{Err: fmt.Errorf("--out %s exists; pass --force to overwrite it", out)}
			} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			ctxPath := ""
			if natsCtx != "" {
				var err error
				if ctxPath, err = natsContextPath(natsCtx, force); err != nil {
					return cli.UsageError{Err: err}
				}
			}
			var uc tenancy.UserCreds
			if err := g.call(cmd.Context(), tenancy.SubjUserAdd, tenancy.UserRequest{Actor: actor(), Tenant: args[0], User: spec}, &uc); err != nil {
				return err
			}
			if err := embeddednats.WriteFileAtomic(out, uc.Creds, 0o600); err != nil {
				return err
			}
			if _, err := fmt.Fprintf(cmd.OutOrStdout(), "user %s of %s: created (%s), credentials in %s; use inbox prefix %s\n",
				spec.Name, args[0], uc.User.PublicKey, out, tenancy.InboxPrefix(spec.Name)); err != nil {
				return err
			}
			if ctxPath == "" {
				return nil
			}
			if err := writeNatsContext(ctxPath, natsContext{Description: fmt.Sprintf("platform tenant %s, user %s", args[0], spec.Name),
				URL: g.server, Creds: out, InboxPrefix: tenancy.InboxPrefix(spec.Name),
				CA: g.tlsCA, Cert: g.tlsCert, Key: g.tlsKey}); err != nil {
				return fmt.Errorf("user %s of %s was created, but its nats context was not saved: %w", spec.Name, args[0], err)
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "nats context %s saved in %s: nats --context %s ...\n", natsCtx, ctxPath, natsCtx)
			return err
		},
	}
	cmd.Flags().StringSliceVar(&spec.Pub, "pub", nil, "topics and queues the user may publish to")
	cmd.Flags().StringSliceVar(&spec.Sub, "sub", nil, "topics, queues and groups the user may read")
	cmd.Flags().StringVar(&out, "out", "", "file to write the .creds to (mode 0600)")
	cmd.Flags().StringVar(&natsCtx, "nats-context", "", "also save a nats CLI context NAME (server, creds, inbox prefix; the --tls-ca, --tls-cert and --tls-key files when given)")
	cmd.Flags().BoolVar(&force, "force", false, "overwrite --out (and --nats-context) if it exists")
	return cmd
}

func newUserListCmd(g *globalOptions) *cobra.Command {
	return printCmd(&cobra.Command{
		Use:   "list TENANT",
		Short: "List a tenant's users",
		Args:  tenantArgs(1, "TENANT"),
	}, g.call, tenancy.SubjUserList, func(args []string) (any, error) {
		return tenancy.NameRequest{Name: args[0]}, nil
	}, writeUsers)
}

func writeUsers(w io.Writer, us []tenancy.User) error {
	return writeTable(w, "USER\tPUB\tSUB\tSTATE\tROLES\tPUBLIC KEY", us, func(w io.Writer, u tenancy.User) {
		state := "active"
		if u.Revoked != nil {
			state = "revoked " + u.Revoked.Format("2006-01-02T15:04:05Z")
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", u.Name, orDash(strings.Join(u.Pub, ",")), orDash(strings.Join(u.Sub, ",")), state,
			orDash(strings.Join(u.Roles, ",")), u.PublicKey)
	})
}

func newUserRevokeCmd(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke TENANT NAME",
		Short: "Revoke a user: its connections are dropped and it cannot connect again",
		Args:  tenantUserArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var u tenancy.User
			if err := g.call(cmd.Context(), tenancy.SubjUserRevoke, tenancy.RevokeRequest{Actor: actor(), Tenant: args[0], User: args[1]}, &u); err != nil {
				return err
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "user %s of %s: revoked\n", u.Name, args[0])
			return err
		},
	}
}

func newUserUpdateCmd(g *globalOptions) *cobra.Command {
	var spec tenancy.UserSpec
	cmd := &cobra.Command{
		Use:   "update TENANT NAME --pub NAMES --sub NAMES",
		Short: "Replace a user's permissions; it keeps its credentials",
		Long: `Replaces the permissions of user NAME of TENANT with --pub and --sub (as for
user add; the lists replace the old ones). The user keeps its .creds: its
permissions live in the tenant's account, which is pushed to every node.
nats-server cannot change a live connection's permissions in place, so the
user's connections are closed and reconnect by themselves (nats.go, the nats
CLI) with the same credentials and the new permissions. Audited with the
permissions before and after.`,
		Args: tenantUserArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			spec.Name = args[1]
			if len(spec.Pub)+len(spec.Sub) == 0 {
				return cli.UsageError{Err: errors.New("give at least one --pub or --sub")}
			}
			var u tenancy.User
			if err := g.call(cmd.Context(), tenancy.SubjUserUpdate, tenancy.UserRequest{Actor: actor(), Tenant: args[0], User: spec}, &u); err != nil {
				return err
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "user %s of %s: permissions now pub=%s sub=%s\n",
				u.Name, args[0], orDash(strings.Join(u.Pub, ",")), orDash(strings.Join(u.Sub, ",")))
			return err
		},
	}
	cmd.Flags().StringSliceVar(&spec.Pub, "pub", nil, "topics and queues the user may publish to (replaces the old list)")
	cmd.Flags().StringSliceVar(&spec.Sub, "sub", nil, "topics, queues and groups the user may read (replaces the old list)")
	return cmd
}

// tenantUserArgs checks the TENANT NAME arguments of a user command: a
// usage error for a wrong count, or for the first name that is not valid.
func tenantUserArgs(cmd *cobra.Command, args []string) error {
	if err := exactArgs(2, "TENANT NAME")(cmd, args); err != nil {
		return err
	}
	for _, n := range []struct{ what, v string }{{"tenant", args[0]}, {"user", args[1]}} {
		if err := tenancy.ValidateName(n.what, n.v); err != nil {
			return cli.UsageError{Err: err}
		}
	}
	return nil
}
