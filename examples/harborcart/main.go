// Command harborcart runs the design guide's HarborCart example end to end
// against a running platform (the dev fabric of conf/dev.yaml):
//
//	go run ./cmd/platformd --config conf/dev.yaml   # terminal 1
//	go run ./examples/harborcart                    # terminal 2
//
// Checkout publishes orders with platform.Publisher; email-notifier,
// sales-analytics and fraud-monitor consume the orders topic as three
// consumer groups; shipment workers ship them; a poison order lands in the
// orders DLQ with its reason; a worker that crashes holding a job has it
// recovered by its lease. It prints each step and exits 0 when every check
// holds, 1 when one does not or the run fails, 2 on bad flags.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
)

func main() {
	cfg := DefaultConfig()
	fs := flag.NewFlagSet("harborcart", flag.ContinueOnError)
	fs.StringVar(&cfg.Server, "server", cfg.Server, "NATS URL of the platform")
	fs.StringVar(&cfg.Creds, "creds", cfg.Creds, "admin credentials file written by platformd")
	fs.IntVar(&cfg.Orders, "orders", cfg.Orders, "orders checkout places (plus one poison order)")
	fs.DurationVar(&cfg.Lease, "lease", cfg.Lease, "lease of the demo shipment queue "+DemoQueue)
	fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "give up after this long")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "harborcart:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := Run(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "harborcart:", err)
		os.Exit(1)
	}
	fmt.Println("harborcart: every check holds")
}
