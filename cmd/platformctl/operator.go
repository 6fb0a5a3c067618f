package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/internal/cli"
	"github.com/msgplatform/platform/internal/principal"
)

func newOperatorCmd(g *globalOptions) *cobra.Command {
	var userCreds string
	cmd := &cobra.Command{
		Use:   "operator",
		Short: "Platform operators: named users of the platform admin account (name@platform), for four-eyes on the platform scope",
		Long: `Platform operators are named users of the platform admin account: alice's
signed requests (--user-creds alice.creds) are recorded as alice@platform, so two
operators can request and approve each other's review-required redrives and
group resets on platform topics. Their credentials are as powerful as the
bootstrap admin.creds on the broker: give them to people, not programs.

add and revoke must be signed by a platform principal: --user-creds FILE
(default PLATFORM_USER_CREDS, else the --creds file, normally the bootstrap
admin.creds). The admin account's signing key stays in platformd; the new
user's seed is generated here and never sent. Every change is audited
(platformctl audit).`,
	}
	cmd.PersistentFlags().StringVar(&userCreds, "user-creds", os.Getenv("PLATFORM_USER_CREDS"),
		"the .creds that signs add/revoke: the bootstrap admin's or an operator's (env PLATFORM_USER_CREDS; default the --creds file)")
	signer := func() string {
		if userCreds != "" {
			return userCreds
		}
		return g.credsPath()
	}
	cmd.AddCommand(newOperatorAddCmd(g, signer), newOperatorListCmd(g), newOperatorRevokeCmd(g, signer))
	return cmd
}

func newOperatorAddCmd(g *globalOptions, signer func() string) *cobra.Command {
	var out, expires string
	var force bool
	cmd := &cobra.Command{
		Use:   "add NAME --out FILE [--expires 90d]",
		Short: "Add platform operator NAME (NAME@platform) and write its .creds file (0600), usable by the nats CLI and nats.go",
		Long: `Add platform operator NAME (NAME@platform) and write its .creds file (0600).

The credentials expire after --expires (default 90d; days as Nd, or a
duration such as 720h or 2h30m; 0 for never, with a warning): from then on
the broker refuses their connections and platformd their signed requests.
To renew, revoke the operator and add it again (a new key).`,
		Args: exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := principal.ValidateOperatorName(name); err != nil {
				return cli.UsageError{Err: err}
			}
			validity, err := principal.ParseExpiry(expires)
			if err != nil {
				return cli.UsageError{Err: fmt.Errorf("--expires: %w", err)}
			}
			req := principal.OperatorAddRequest{Name: name, ExpiresIn: validity, NeverExpires: validity == 0}
			if out == "" {
				return cli.UsageError{Err: errors.New("--out FILE is required: where to write the operator's credentials")}
			}
			if _, err := os.Stat(out); err == nil && !force {
				return cli.UsageError{Err: fmt.Errorf("--out %s exists; pass --force to overwrite it", out)}
			} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return cli.UsageError{Err: fmt.Errorf("--out %s: %w", out, err)}
			}
			// The file must be writable before the operator exists: a
			// user whose creds were lost can only be revoked.
			probe, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".probe*")
			if err != nil {
				return cli.UsageError{Err: fmt.Errorf("--out %s: cannot write there: %w", out, err)}
			}
			probe.Close()
			os.Remove(probe.Name())
			kp, err := nkeys.CreateUser()
			if err != nil {
				return err
			}
			pub, _ := kp.PublicKey()
			seed, err := kp.Seed()
			if err != nil {
				return err
			}
			req.PublicKey = pub
			var resp principal.OperatorAddResponse
			if err := g.callAs(cmd.Context(), signer(), principal.SubjOperatorAdd, req, &resp); err != nil {
				return err
			}
			uc, err := jwt.DecodeUserClaims(resp.JWT)
			if err != nil || uc.Subject != pub || uc.Name != name {
				return fmt.Errorf("platformd answered with a JWT that is not operator %s's (%v); revoke it: platformctl operator revoke %s", name, err, name)
			}
			creds, err := jwt.FormatUserConfig(resp.JWT, seed)
			if err != nil {
				return err
			}
			if err := embeddednats.WriteFileAtomic(out, creds, 0o600); err != nil {
				return fmt.Errorf("%w; operator %s exists but its credentials are lost: revoke it (platformctl operator revoke %s) and add it again", err, name, name)
			}
			expiry := "never expires"
			if uc.Expires > 0 {
				expiry = "expires " + time.Unix(uc.Expires, 0).UTC().Format(time.RFC3339)
			}
			switch {
			case uc.Expires == 0 && validity == 0:
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: operator %s's credentials never expire (--expires 0): revoke them (platformctl operator revoke %s) when they are no longer needed\n", name, name)
			case uc.Expires == 0:
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: platformd set no expiry (an older platformd?): operator %s's credentials never expire; revoke them (platformctl operator revoke %s) when they are no longer needed\n", name, name)
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "operator %s added (%s, key %s, %s), credentials in %s; sign with --user-creds %s\n",
				name, resp.Operator.Principal(), pub, expiry, out, out)
			return err
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "file to write the .creds to (mode 0600)")
	cmd.Flags().StringVar(&expires, "expires", "90d", "how long the credentials are valid: days (90d) or a duration (720h); 0: never (warned)")
	cmd.Flags().BoolVar(&force, "force", false, "overwrite --out if it exists")
	return cmd
}

func newOperatorListCmd(g *globalOptions) *cobra.Command {
	return printCmd(&cobra.Command{
		Use:   "list",
		Short: "List the platform operators (and the bootstrap admin)",
		Args:  exactArgs(0, "no arguments"),
	}, g.call, principal.SubjOperatorList, func([]string) (any, error) { return struct{}{}, nil }, writeOperators)
}

func writeOperators(w io.Writer, ops []principal.Operator) error {
	now := time.Now()
	return writeTable(w, "PRINCIPAL\tSTATE\tADDED\tBY\tPUBLIC KEY\tEXPIRES", ops, func(w io.Writer, o principal.Operator) {
		state, by := "active", orDash(o.CreatedBy)
		switch {
		case o.Bootstrap:
			state, by = "bootstrap (trust.json)", "-"
		case o.Revoked != nil:
			state = "revoked " + o.Revoked.UTC().Format("2006-01-02T15:04:05Z") + " by " + orDash(o.RevokedBy)
		case o.Expired(now):
			state = "expired"
		}
		expires := "never"
		if o.Expires != nil {
			expires = o.Expires.UTC().Format("2006-01-02T15:04:05Z")
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", o.Principal(), state, o.Created.UTC().Format("2006-01-02T15:04:05Z"), by, o.PublicKey, expires)
	})
}

func newOperatorRevokeCmd(g *globalOptions, signer func() string) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke NAME",
		Short: "Revoke platform operator NAME: its signed requests are refused and the broker drops its connections",
		Args:  exactArgs(1, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] == principal.BootstrapAdmin {
				return cli.UsageError{Err: errors.New("the bootstrap admin user (trust.json) cannot be revoked: every platformd connects with it")}
			}
			if err := principal.ValidateOperatorName(args[0]); err != nil {
				return cli.UsageError{Err: err}
			}
			var op principal.Operator
			if err := g.callAs(cmd.Context(), signer(), principal.SubjOperatorRevoke, principal.OperatorRevokeRequest{Name: args[0]}, &op); err != nil {
				return err
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "operator %s revoked (key %s)\n", op.Principal(), op.PublicKey)
			return err
		},
	}
}
