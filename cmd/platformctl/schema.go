package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/internal/cli"
	"github.com/msgplatform/platform/platform/schema"
)

func newSchemaCmd(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schema",
		Short: "Register, check, list and show JSON Schema versions per event type",
		Long: `The schema registry keeps JSON Schema versions (1..n, immutable) per event
type, and refuses a version that breaks the type's compatibility mode (none,
backward, forward, full, or their _transitive forms; default backward),
naming every rule it breaks.`,
	}
	cmd.AddCommand(newSchemaRegisterCmd(g), newSchemaCheckCmd(g), newSchemaListCmd(g), newSchemaShowCmd(g), newSchemaModeCmd(g))
	return cmd
}

// readSchemaFile reads --file ("-" is stdin).
func readSchemaFile(cmd *cobra.Command, path string) ([]byte, error) {
	if path == "" {
		return nil, cli.UsageError{Err: errors.New("--file: the JSON Schema file is required (- for stdin)")}
	}
	var (
		b   []byte
		err error
	)
	if path == "-" {
		b, err = io.ReadAll(cmd.InOrStdin())
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, cli.UsageError{Err: fmt.Errorf("--file: %w", err)}
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil, cli.UsageError{Err: fmt.Errorf("--file %s: empty", path)}
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, cli.UsageError{Err: fmt.Errorf("--file %s: not JSON: %v", path, err)}
	}
	return b, nil
}

func parseModeFlag(m string) (schema.Mode, error) {
	if m == "" {
		return "", nil
	}
	mode := schema.Mode(m)
	if err := mode.Validate(); err != nil {
		return "", cli.UsageError{Err: fmt.Errorf("--mode: %w", err)}
	}
	return mode, nil
}

func newSchemaRegisterCmd(g *globalOptions) *cobra.Command {
	return schemaInputCmd(g, &cobra.Command{
		Use:   "register TYPE --file schema.json [--mode backward]",
		Short: "Register the next version of TYPE's schema if it is compatible",
		Long: `Registers the JSON Schema in --file as the next version of the event type
TYPE. It is checked against the previous version (all previous versions
under a _transitive mode); an incompatible schema is refused with every rule
it breaks and nothing is written. --mode sets TYPE's mode in the same write
(and the check runs under it). Registering a schema already registered
returns its version.`,
		Args: exactArgs(1, "TYPE"),
	}, schema.SubjRegister, "set TYPE's compatibility mode: none, backward, forward, full, backward_transitive, forward_transitive, full_transitive",
		func(typ string, doc []byte, m schema.Mode) any {
			return schema.RegisterRequest{Subject: typ, Schema: doc, Mode: m}
		}, writeRegistered)
}

func writeRegistered(w io.Writer, r schema.Registered) error {
	if r.Existing {
		fmt.Fprintf(w, "unchanged: %s v%d already has this schema (mode %s)\n", r.Subject, r.Version.Version, r.Mode)
		return nil
	}
	fmt.Fprintf(w, "registered %s v%d (mode %s%s, fingerprint %s)\n", r.Subject, r.Version.Version, r.Mode, checkedAgainst(r.CheckedAgainst), r.Fingerprint)
	return nil
}

// schemaInputCmd completes cmd (TYPE --file FILE [--mode MODE]) into a
// command that sends subject the request request makes of TYPE, the
// schema in --file and --mode (modeUsage is its help), and prints the
// reply with text. A schema, mode or TYPE that is not valid is a usage
// error, and nothing is sent.
func schemaInputCmd[T any](g *globalOptions, cmd *cobra.Command, subject, modeUsage string, request func(typ string, doc []byte, m schema.Mode) any, text func(io.Writer, T) error) *cobra.Command {
	var file, mode string
	printCmd(cmd, g.call, subject, func(args []string) (any, error) {
		b, m, err := schemaInput(cmd, args[0], file, mode)
		return request(args[0], b, m), err
	}, text)
	cmd.Flags().StringVar(&file, "file", "", "JSON Schema file (- for stdin)")
	cmd.Flags().StringVar(&mode, "mode", "", modeUsage)
	return cmd
}

// schemaInput reads what register and check send: the schema in file,
// the --mode flag, and a valid event type name.
func schemaInput(cmd *cobra.Command, subject, file, mode string) ([]byte, schema.Mode, error) {
	b, err := readSchemaFile(cmd, file)
	if err != nil {
		return nil, "", err
	}
	m, err := parseModeFlag(mode)
	if err != nil {
		return nil, "", err
	}
	if err := schema.ValidateSubject(subject); err != nil {
		return nil, "", cli.UsageError{Err: err}
	}
	return b, m, nil
}

func checkedAgainst(vs []int) string {
	if len(vs) == 0 {
		return ""
	}
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = "v" + strconv.Itoa(v)
	}
	return "; checked against " + strings.Join(s, ", ")
}

// errIncompatible makes `schema check` exit 1 when the schema would be
// refused (after printing why).
var errIncompatible = errors.New("schema check: incompatible")

func newSchemaCheckCmd(g *globalOptions) *cobra.Command {
	return schemaInputCmd(g, &cobra.Command{
		Use:   "check TYPE --file schema.json [--mode MODE]",
		Short: "Say whether a schema could be registered for TYPE, and which rules it breaks",
		Long: `Checks the JSON Schema in --file against TYPE's versions under TYPE's mode
(or --mode) without registering it. Exits 1 when it is incompatible, after
listing every rule it breaks.`,
		Args: exactArgs(1, "TYPE"),
	}, schema.SubjCheck, "check under this mode instead of TYPE's",
		func(typ string, doc []byte, m schema.Mode) any {
			return schema.CheckRequest{Subject: typ, Schema: doc, Mode: m}
		}, writeCheckResult)
}

// writeCheckResult says whether the schema could be registered;
// errIncompatible when not, after every rule it breaks.
func writeCheckResult(w io.Writer, r schema.CheckResult) error {
	switch {
	case r.Existing > 0:
		fmt.Fprintf(w, "compatible: %s v%d already has this schema\n", r.Subject, r.Existing)
	case r.Compatible:
		fmt.Fprintf(w, "compatible: it would become %s v%d (mode %s%s)\n", r.Subject, r.Version, r.Mode, checkedAgainst(r.CheckedAgainst))
	default:
		fmt.Fprintf(w, "incompatible: %s v%d would be refused under mode %s%s:\n", r.Subject, r.Version, r.Mode, checkedAgainst(r.CheckedAgainst))
		for _, v := range r.Violations {
			fmt.Fprintf(w, "  - [%s] %s\n", v.Rule, v.Message)
		}
		return errIncompatible
	}
	return nil
}

func newSchemaListCmd(g *globalOptions) *cobra.Command {
	return printCmd(&cobra.Command{
		Use:   "list",
		Short: "List event types with their mode and latest version",
		Args:  cobra.NoArgs,
	}, g.call, schema.SubjList, noRequest, writeSubjects)
}

func writeSubjects(w io.Writer, list []schema.SubjectInfo) error {
	if len(list) == 0 {
		fmt.Fprintln(w, "no schemas registered (platformctl schema register TYPE --file schema.json)")
		return nil
	}
	return writeTable(w, "TYPE\tMODE\tLATEST", list, func(w io.Writer, s schema.SubjectInfo) {
		latest := "-"
		if s.Latest > 0 {
			latest = "v" + strconv.Itoa(s.Latest)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", s.Subject, s.Mode, latest)
	})
}

func newSchemaShowCmd(g *globalOptions) *cobra.Command {
	var version int
	cmd := printCmd(&cobra.Command{
		Use:   "show TYPE [--version N]",
		Short: "Show one version of TYPE's schema (default the latest)",
		Args:  exactArgs(1, "TYPE"),
	}, g.call, schema.SubjShow, func(args []string) (any, error) {
		if version < 0 {
			return nil, cli.UsageError{Err: fmt.Errorf("--version: want a version >= 1, got %d", version)}
		}
		return schema.ShowRequest{Subject: args[0], Version: version}, nil
	}, writeSchemaVersion)
	cmd.Flags().IntVar(&version, "version", 0, "version to show (default the latest)")
	return cmd
}

func writeSchemaVersion(w io.Writer, r schema.ShowResponse) error {
	fmt.Fprintf(w, "Schema %s v%d of %d\n", r.Subject, r.Version.Version, len(r.Versions))
	fmt.Fprintf(w, "  mode:        %s (v%d registered under %s)\n", r.Mode, r.Version.Version, r.Version.Mode)
	fmt.Fprintf(w, "  registered:  %s\n", r.Version.Registered.Format("2006-01-02T15:04:05Z"))
	fmt.Fprintf(w, "  fingerprint: %s\n", r.Version.Fingerprint)
	fmt.Fprintf(w, "%s\n", indentJSON(r.Version.Schema))
	return nil
}

func newSchemaModeCmd(g *globalOptions) *cobra.Command {
	return printCmd(&cobra.Command{
		Use:   "mode TYPE MODE",
		Short: "Set TYPE's compatibility mode (applies to the next registration)",
		Args:  exactArgs(2, "TYPE MODE"),
	}, g.call, schema.SubjMode, func(args []string) (any, error) {
		m, err := parseModeFlag(args[1])
		return schema.ModeRequest{Subject: args[0], Mode: m}, err
	}, func(w io.Writer, r schema.SubjectInfo) error {
		fmt.Fprintf(w, "%s: mode %s\n", r.Subject, r.Mode)
		return nil
	})
}

func indentJSON(raw []byte) string {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return string(raw)
	}
	return b.String()
}
