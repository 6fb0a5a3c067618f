// Command platformd runs the messaging platform: one embedded NATS node
// (mode node) or a dev fabric of N nodes in one process (mode fabric), the
// control API, and /healthz, /readyz and /metrics.
//
//	platformd --config conf/dev.yaml [--data-dir DIR]
//	platformd init --data-dir DIR     # create the trust material once
//	platformd healthcheck [--url URL] # exit 0 when /readyz answers 200
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/msgplatform/platform/conf"
	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/internal/daemon"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
	exitConfig  = 3
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	if len(args) > 0 {
		switch args[0] {
		case "init":
			return runInit(args[1:])
		case "healthcheck":
			return runHealthcheck(args[1:])
		}
	}
	fs := pflag.NewFlagSet("platformd", pflag.ContinueOnError)
	fs.String("config", "", "configuration file (YAML); env PLATFORM_* and flags override it")
	fs.String("data-dir", "", "data directory: trust/, creds/ and node stores (default: data)")
	printCfg := fs.Bool("print-config", false, "print the effective configuration and exit")
	debug := fs.Bool("debug", false, "debug logging")
	drain := fs.Duration("drain", 30*time.Second, "deadline for draining the nodes on SIGTERM")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	file, _ := fs.GetString("config")
	cfg, err := conf.Load(conf.LoadOptions{File: file, Flags: fs})
	if err != nil {
		fmt.Fprintln(os.Stderr, "platformd:", err)
		return exitConfig
	}
	if *printCfg {
		fmt.Println(cfg.String())
		return exitOK
	}
	procs, why := embeddednats.SetProcs()
	log.Info("go scheduler", "gomaxprocs", procs, "why", why)
	d, err := daemon.New(cfg, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "platformd:", err)
		return exitConfig
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := d.Run(ctx, *drain); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "platformd:", err)
		return exitFailure
	}
	return exitOK
}

// runInit creates the installation's trust material and admin credentials
// in a data directory, once; every node of every region must share it.
func runInit(args []string) int {
	fs := pflag.NewFlagSet("platformd init", pflag.ContinueOnError)
	dataDir := fs.String("data-dir", "data", "data directory to create trust/ and creds/ in")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	t, err := embeddednats.LoadOrCreateTrust(filepath.Join(*dataDir, "trust"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "platformd init:", err)
		return exitFailure
	}
	p, err := t.WriteCreds(filepath.Join(*dataDir, "creds"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "platformd init:", err)
		return exitFailure
	}
	fmt.Printf("trust: %s\nadmin creds: %s\n", filepath.Join(*dataDir, "trust", "trust.json"), p)
	return exitOK
}
