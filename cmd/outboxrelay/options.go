package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/msgplatform/platform/internal/cli"
	"github.com/msgplatform/platform/internal/pgmigrate"
	"github.com/msgplatform/platform/internal/tlsconf"
	"github.com/msgplatform/platform/outboxrelay"
)

// errHelp is returned for --help (exit code 2, usage already printed).
var errHelp = errors.New("help requested")

// options are the command line.
type options struct {
	dsn, pebbleDir string
	schema         string
	natsURL, creds string
	httpAddr       string
	topicMap       string
	// tls is --tls-ca, --tls-cert, --tls-key: the platform's client port
	// with TLS.
	tls tlsconf.Config
	cfg outboxrelay.Config
}

// envPauseAfterPublish, when "1", makes the relay stop for good after
// publishing a batch and before marking it sent, printing faultLine: the
// crash tests SIGKILL it there. Never set it in production.
const envPauseAfterPublish = "OUTBOXRELAY_TEST_PAUSE_AFTER_PUBLISH"

// faultLine is printed when the test fault stops the relay.
const faultLine = "outboxrelay: test fault: paused after publish, before mark"

func parseOptions(args []string, stderr io.Writer) (options, error) {
	o := options{cfg: outboxrelay.DefaultConfig("default")}
	fs := flag.NewFlagSet("outboxrelay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.dsn, "dsn", "", "PostgreSQL DSN of the service database holding the outbox (its schema is migrated if needed)")
	fs.StringVar(&o.schema, "schema", "outboxrelay", "with --dsn: the schema holding the outbox (one schema per outbox when a database has several)")
	fs.StringVar(&o.pebbleDir, "pebble", "", "directory of a Pebble database holding the outbox (the service must not be running)")
	fs.StringVar(&o.natsURL, "nats", "nats://127.0.0.1:4222", "platform URLs, comma-separated")
	fs.StringVar(&o.creds, "creds", "", "NATS .creds file of the account publishing the events")
	fs.StringVar(&o.tls.CAFile, "tls-ca", os.Getenv("PLATFORM_TLS_CA"), "CA file (PEM) the platform's certificate is checked against; connects with TLS (env PLATFORM_TLS_CA; a tls:// URL without it uses the system roots)")
	fs.StringVar(&o.tls.CertFile, "tls-cert", os.Getenv("PLATFORM_TLS_CERT"), "client certificate (PEM) for a client port with TLS verify (mTLS), with --tls-key (env PLATFORM_TLS_CERT)")
	fs.StringVar(&o.tls.KeyFile, "tls-key", os.Getenv("PLATFORM_TLS_KEY"), "the --tls-cert's private key (PEM) (env PLATFORM_TLS_KEY)")
	fs.StringVar(&o.httpAddr, "http", "127.0.0.1:9466", "serve Prometheus metrics on http://ADDR/metrics (empty: off)")
	fs.StringVar(&o.cfg.Name, "name", o.cfg.Name, "outbox name: the lease key (one active relay per name) and the metrics label")
	fs.StringVar(&o.topicMap, "topic-map", "", "map event topics to platform topics: from=to,from2=to2 (others are used as they are)")
	fs.DurationVar(&o.cfg.LeaseTTL, "lease-ttl", o.cfg.LeaseTTL, "a standby takes over after this long without a renewal")
	fs.DurationVar(&o.cfg.Retention, "retention", o.cfg.Retention, "keep sent events this long before pruning them")
	fs.IntVar(&o.cfg.BatchSize, "batch", o.cfg.BatchSize, "events read per round")
	fs.IntVar(&o.cfg.MaxInFlight, "max-in-flight", o.cfg.MaxInFlight, "publishes awaiting an ack")
	fs.BoolVar(&o.cfg.SinglePublishes, "single-publishes", false, "publish every event on its own (one ack each) instead of a backlog in fast batches")
	fs.DurationVar(&o.cfg.AckTimeout, "ack-timeout", o.cfg.AckTimeout, "wait for one publish's ack before retrying it (same id)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, cli.UsageError{Err: errHelp}
		}
		return o, cli.UsageError{Err: err}
	}
	if fs.NArg() > 0 {
		return o, cli.UsageError{Err: fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	if (o.dsn == "") == (o.pebbleDir == "") {
		return o, cli.UsageError{Err: errors.New("exactly one of --dsn (PostgreSQL) and --pebble (Pebble directory) is required")}
	}
	if o.dsn != "" && !pgmigrate.ValidSchema(o.schema) {
		return o, cli.UsageError{Err: fmt.Errorf("--schema %q: want a lower-case SQL identifier (letters, digits, '_', at most 63)", o.schema)}
	}
	if _, err := o.tls.FlagClient(tlsFlags); err != nil {
		return o, cli.UsageError{Err: err}
	}
	tm, err := outboxrelay.ParseTopicMap(o.topicMap)
	if err != nil {
		return o, cli.UsageError{Err: fmt.Errorf("--topic-map: %w", err)}
	}
	o.cfg.TopicMap = tm
	if err := o.cfg.Validate(); err != nil {
		return o, cli.UsageError{Err: err}
	}
	return o, nil
}

// tlsFlags names the flags of the relay's TLS files.
var tlsFlags = tlsconf.Flags{CA: "--tls-ca", Cert: "--tls-cert", Key: "--tls-key"}
