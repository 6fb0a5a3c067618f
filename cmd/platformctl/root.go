package main

import (
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/internal/cli"
)

// globalOptions are the connection settings every subcommand that talks to
// platformd shares. Flags win over PLATFORM_URL / PLATFORM_CREDS, which win
// over the dev-fabric defaults.
type globalOptions struct {
	server  string
	creds   string
	dataDir string
	timeout string
	// tlsCA, tlsCert, tlsKey: --tls-ca, --tls-cert, --tls-key.
	tlsCA, tlsCert, tlsKey string
}

// defaultServerURL is the client port of the first node of conf/dev.yaml.
const defaultServerURL = "nats://127.0.0.1:4222"

// defaultDataDir is the data directory platformd uses when none is given.
const defaultDataDir = "data"

func newRootCmd() *cobra.Command {
	g := &globalOptions{}
	root := &cobra.Command{
		Use:           "platformctl",
		Short:         "Operate the messaging platform: topics, queues, capacity, benchmarks",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return cli.UsageError{Err: err} })
	pf := root.PersistentFlags()
	pf.StringVar(&g.server, "server", envOr("PLATFORM_URL", defaultServerURL), "NATS URL of the platform (env PLATFORM_URL)")
	pf.StringVar(&g.creds, "creds", os.Getenv("PLATFORM_CREDS"), "admin credentials file (env PLATFORM_CREDS; default <data-dir>/creds/admin.creds)")
	pf.StringVar(&g.dataDir, "data-dir", envOr("PLATFORM_DATA_DIR", defaultDataDir), "platformd data directory, used to find the default creds")
	pf.StringVar(&g.timeout, "timeout", "10s", "timeout for each request to the platform")
	pf.StringVar(&g.tlsCA, "tls-ca", os.Getenv("PLATFORM_TLS_CA"), "CA file (PEM) the platform's certificate is checked against; connects with TLS (env PLATFORM_TLS_CA; a tls:// URL without it uses the system roots)")
	pf.StringVar(&g.tlsCert, "tls-cert", os.Getenv("PLATFORM_TLS_CERT"), "client certificate (PEM) for a client port with TLS verify (mTLS), with --tls-key (env PLATFORM_TLS_CERT)")
	pf.StringVar(&g.tlsKey, "tls-key", os.Getenv("PLATFORM_TLS_KEY"), "the --tls-cert's private key (PEM) (env PLATFORM_TLS_KEY)")

	root.AddCommand(
		newCapacityCmd(),
		newStatusCmd(g),
		newTopicCmd(g),
		newQueueCmd(g),
		newGroupCmd(g),
		newBenchCmd(g),
		newTenantCmd(g), newUserCmd(g), newUsageCmd(g), newAuditCmd(g),
		newOperatorCmd(g),
		newOutboxCmd(g),
		newDLQCmd(g), newRedriveCmd(g),
		newRegionCmd(g), newResidencyCmd(g),
	)
	root.AddCommand(newSchemaCmd(g))
	return root
}

// credsPath returns the credentials file to use.
func (g *globalOptions) credsPath() string {
	if g.creds != "" {
		return g.creds
	}
	return filepath.Join(g.dataDir, "creds", "admin.creds")
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// parentCmd is a command that only holds its subcommands.
func parentCmd(use, short string, subs ...*cobra.Command) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short}
	cmd.AddCommand(subs...)
	return cmd
}
