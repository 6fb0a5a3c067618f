package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/internal/cli"
	"github.com/msgplatform/platform/outboxrelay"
	"github.com/msgplatform/platform/outboxrelay/pgoutbox"
)

func newOutboxCmd(g *globalOptions) *cobra.Command {
	return parentCmd("outbox", "Transactional outbox: run a relay for a PostgreSQL outbox, show its backlog",
		newOutboxRelayCmd(g), newOutboxStatusCmd())
}

type outboxRelayOptions struct {
	dsn, name, topicMap string
	schema              string
	leaseTTL            time.Duration
	retention           time.Duration
	batch               int
	singlePublishes     bool
}

func newOutboxRelayCmd(g *globalOptions) *cobra.Command {
	o := outboxRelayOptions{}
	cmd := &cobra.Command{
		Use:   "relay",
		Short: "Publish a PostgreSQL outbox's events to their topics until interrupted",
		Long: `Runs an outbox relay against the service database --dsn (migrating the
outboxrelay schema if needed) and the platform at --server with --creds. Any
number of relays may run for one outbox: one holds the lease and publishes,
the others stand by and take over within --lease-ttl of its death.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.dsn == "" {
				return cli.UsageError{Err: fmt.Errorf("--dsn is required")}
			}
			cfg := outboxrelay.DefaultConfig(o.name)
			cfg.LeaseTTL, cfg.Retention, cfg.BatchSize = o.leaseTTL, o.retention, o.batch
			cfg.SinglePublishes = o.singlePublishes
			tm, err := outboxrelay.ParseTopicMap(o.topicMap)
			if err != nil {
				return cli.UsageError{Err: fmt.Errorf("--topic-map: %w", err)}
			}
			cfg.TopicMap = tm
			cfg.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			if err := cfg.Validate(); err != nil {
				return cli.UsageError{Err: err}
			}
			ctx := cmd.Context()
			pool, err := pgxpool.New(ctx, o.dsn)
			if err != nil {
				return fmt.Errorf("--dsn: %w", err)
			}
			defer pool.Close()
			store, err := pgoutbox.Open(pool, pgoutbox.Options{Schema: o.schema})
			if err != nil {
				return cli.UsageError{Err: fmt.Errorf("--schema: %w", err)}
			}
			if err := store.Migrate(ctx); err != nil {
				return err
			}
			// Reconnect forever; fail publishes at once while disconnected
			// instead of buffering them (the relay retries them).
			opts, err := g.natsOptions("platformctl-outbox-relay")
			if err != nil {
				return err
			}
			nc, err := nats.Connect(g.server, append(opts, nats.UserCredentials(g.credsPath()),
				nats.MaxReconnects(-1), nats.ReconnectBufSize(-1))...)
			if err != nil {
				return fmt.Errorf("connect to %s with %s: %w", g.server, g.credsPath(), err)
			}
			defer nc.Close()
			r, err := outboxrelay.New(cfg, store, nc)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "outbox relay %s (holder %s) running; Ctrl-C to stop\n", cfg.Name, cfg.Holder)
			return r.Run(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.dsn, "dsn", "", "PostgreSQL DSN of the service database holding the outbox (required)")
	f.StringVar(&o.name, "name", "default", "outbox name (lease key and metrics label)")
	f.StringVar(&o.schema, "schema", pgoutbox.DefaultSchema, "schema holding the outbox (one schema per outbox when a database has several)")
	f.StringVar(&o.topicMap, "topic-map", "", "map event topics to platform topics: from=to,from2=to2")
	f.DurationVar(&o.leaseTTL, "lease-ttl", 4*time.Second, "a standby takes over after this long without a renewal")
	f.DurationVar(&o.retention, "retention", 24*time.Hour, "keep sent events this long")
	f.IntVar(&o.batch, "batch", 1000, "events read per round")
	f.BoolVar(&o.singlePublishes, "single-publishes", false, "publish every event on its own (one ack each) instead of a backlog in fast batches")
	return cmd
}

func newOutboxStatusCmd() *cobra.Command {
	var dsn, schema string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Backlog of a PostgreSQL outbox: unsent events and the oldest one's age",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dsn == "" {
				return cli.UsageError{Err: fmt.Errorf("--dsn is required")}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
			defer cancel()
			pool, err := pgxpool.New(ctx, dsn)
			if err != nil {
				return fmt.Errorf("--dsn: %w", err)
			}
			defer pool.Close()
			store, err := pgoutbox.Open(pool, pgoutbox.Options{Schema: schema})
			if err != nil {
				return cli.UsageError{Err: fmt.Errorf("--schema: %w", err)}
			}
			st, err := store.Stats(ctx)
			if err != nil {
				return err
			}
			age := time.Duration(0)
			if !st.OldestUnsent.IsZero() {
				age = time.Since(st.OldestUnsent)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "outbox.unsent: %d events\noutbox.oldest_unsent_age: %.3f s\n", st.Unsent, age.Seconds())
			return nil
		},
	}
	cmd.Flags().StringVar(&dsn, "dsn", "", "PostgreSQL DSN of the service database (required)")
	cmd.Flags().StringVar(&schema, "schema", pgoutbox.DefaultSchema, "schema holding the outbox")
	return cmd
}
