// Command outboxrelay publishes a transactional outbox's events to their
// platform topics: a PostgreSQL outbox (--dsn) or a Pebble outbox
// (--pebble DIR, whose service is not running: Pebble locks its
// directory). It is outboxrelay.Relay as a small static binary.
//
// Guarantee: at-least-once publication with Nats-Msg-Id = event id, in
// commit order per key (see package outboxrelay). Any number of copies may
// run for one outbox: one holds the lease and publishes, the others stand
// by and take over within --lease-ttl of its death. Killed at any point
// (SIGKILL included), a restarted relay republishes only events it had
// not marked sent, with their original ids, so the stream (within its
// duplicate window) and the consumers' inboxes (after it) drop them.
//
// SIGINT or SIGTERM stops it gracefully: acked events are marked sent and
// the lease is released so a standby takes over at once.
//
// Exit codes: 0 stopped by a signal, 2 bad flags, 1 any other failure.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/msgplatform/platform/internal/cli"
)

func main() {
	cli.Main(func(ctx context.Context) error { return run(ctx, os.Args[1:], os.Stderr) },
		func(err error) int { return exitCode(err, os.Stderr) })
}

// run parses args, builds the relay and runs it until ctx ends.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	o, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	return relay(ctx, o, stderr)
}

func exitCode(err error, stderr io.Writer) int {
	var uerr cli.UsageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &uerr):
		if !errors.Is(err, errHelp) {
			fmt.Fprintf(stderr, "outboxrelay: %v (see --help)\n", err)
		}
		return 2
	default:
		fmt.Fprintf(stderr, "outboxrelay: %v\n", err)
		return 1
	}
}
