package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/internal/cli"
	"github.com/msgplatform/platform/tenancy"
)

func newUserRoleCmd(g *globalOptions) *cobra.Command {
	var r tenancy.RoleRequest
	var userCreds string
	cmd := &cobra.Command{
		Use:   "role TENANT NAME --add ROLES --remove ROLES",
		Short: "Grant or withdraw a user's tenant roles for DLQ review and redrive (viewer, approver, operator)",
		Long: `Adds (--add) and removes (--remove) tenant roles of user NAME of TENANT, on
top of what its --pub and --sub permissions allow in the web console and
through platformctl dlq|redrive --user-creds:

  viewer    sees every DLQ of the tenant (entries, payloads, headers) and
            every redrive request and its history; acts on none by that
  approver  a viewer that also approves or rejects any request (never its
            own on a review: required topic)
  operator  a viewer that also files, runs, pauses, resumes and cancels
            redrives into any topic or queue of the tenant, at most at the
            tenant's publish_rate quota

Without a role a user sees the DLQs of what it may consume (--sub) and
redrives into what it may publish to (--pub). The roles are stored with the
user in the tenant registry and every change is audited (user.role). Only a
platform operator grants roles (sign with --user-creds to be recorded by
name). The user's credentials and NATS permissions do not change.`,
		Args: tenantUserArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			r.Tenant, r.User, r.Actor = args[0], args[1], actor()
			if err := r.Validate(); err != nil {
				return cli.UsageError{Err: err}
			}
			var u tenancy.User
			if err := g.callAs(cmd.Context(), userCreds, tenancy.SubjUserRole, r, &u); err != nil {
				return err
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "user %s of %s: roles %s\n", u.Name, args[0], orDash(strings.Join(u.Roles, ",")))
			return err
		},
	}
	cmd.Flags().StringSliceVar(&r.Add, "add", nil, "roles to grant: viewer, approver, operator")
	cmd.Flags().StringSliceVar(&r.Remove, "remove", nil, "roles to withdraw")
	userCredsFlag(cmd.Flags(), &userCreds)
	return cmd
}
