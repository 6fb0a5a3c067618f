package main

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/internal/cli"
)

// testRoot returns platformctl's root command set to run args, writing
// to the buffers returned.
func testRoot(args []string) (*cobra.Command, *bytes.Buffer, *bytes.Buffer) {
	root := newRootCmd()
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetArgs(args)
	return root, &out, &errOut
}

// wantFigures requires each of names among a bench's figures (got, from
// benchFigures) and progress containing progress on its stderr.
func wantFigures(t *testing.T, bench string, got map[string]string, stdout, stderr, progress string, names ...string) {
	t.Helper()
	for _, name := range names {
		if got[name] == "" {
			t.Errorf("no bench.%s.%s line in:\n%s", bench, name, stdout)
		}
	}
	if !strings.Contains(stderr, progress) {
		t.Errorf("no %q on stderr:\n%s", progress, stderr)
	}
}

// runBench runs platformctl with args (a bench) for at most 2 minutes and
// returns what it wrote to stdout and stderr; a failure ends the test.
func runBench(t *testing.T, args ...string) (stdout, stderr string) {
	t.Helper()
	root, out, errOut := testRoot(args)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := root.ExecuteContext(ctx); err != nil {
		t.Fatalf("%s: %v\nstderr:\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String(), errOut.String()
}

// benchFigures reads the figure lines of a bench's stdout, after its
// first skip lines: each must be "bench.<bench>.<figure>: <value> <unit>"
// (a test error names any that is not). It returns value and unit by
// figure name.
func benchFigures(t *testing.T, bench, stdout string, skip int) map[string]string {
	t.Helper()
	line := regexp.MustCompile(`^bench\.` + bench + `\.[a-z0-9_.]+: [0-9]+(\.[0-9]+)? [a-z/]+$`)
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(stdout), "\n")[skip:] {
		if !line.MatchString(l) {
			t.Errorf("not a 'name: value unit' line: %q", l)
			continue
		}
		kv := strings.SplitN(l, ": ", 2)
		got[strings.TrimPrefix(kv[0], "bench."+bench+".")] = kv[1]
	}
	return got
}

// wantUsageError runs platformctl with args and requires a usage error
// naming each of flags.
func wantUsageError(t *testing.T, args []string, flags ...string) {
	t.Helper()
	root, _, _ := testRoot(args)
	err := root.Execute()
	var ue cli.UsageError
	if err == nil || !errors.As(err, &ue) {
		t.Fatalf("err = %v, want a usage error", err)
	}
	for _, flag := range flags {
		if !strings.Contains(err.Error(), flag) {
			t.Errorf("error %q does not name %s", err, flag)
		}
	}
}
