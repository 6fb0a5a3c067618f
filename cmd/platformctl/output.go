package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/internal/control"
)

// caller sends one control API request and decodes its reply into resp:
// globalOptions.call, or a variant that signs or waits longer.
type caller func(ctx context.Context, subject string, req, resp any) error

// signedBy is callAs with the .creds file *userCreds names when the
// command runs (unsigned when it is "").
func (g *globalOptions) signedBy(userCreds *string) caller {
	return func(ctx context.Context, subject string, req, resp any) error {
		return g.callAs(ctx, *userCreds, subject, req, resp)
	}
}

// printCmd completes cmd (its Use, Short, Long and Args) into a command
// that sends subject the request request makes from the arguments, by
// call, and prints the reply, a T, with text. An error from request or
// call is the command's, and nothing is printed.
func printCmd[T any](cmd *cobra.Command, call caller, subject string, request func(args []string) (any, error), text func(io.Writer, T) error) *cobra.Command {
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		req, err := request(args)
		if err != nil {
			return err
		}
		var v T
		if err := call(cmd.Context(), subject, req, &v); err != nil {
			return err
		}
		return text(cmd.OutOrStdout(), v)
	}
	return cmd
}

// replyCmd is printCmd with -o: the reply is printed with text, or as
// indented JSON with -o json.
func replyCmd[T any](cmd *cobra.Command, call caller, subject string, request func(args []string) (any, error), text func(io.Writer, T) error) *cobra.Command {
	var output string
	addOutputFlag(cmd, &output)
	return printCmd(cmd, call, subject, request, func(w io.Writer, v T) error { return writeOutput(w, output, v, text) })
}

// listCmd is a replyCmd that takes no arguments and sends subject an
// empty request.
func listCmd[T any](g *globalOptions, use, short, subject string, text func(io.Writer, T) error) *cobra.Command {
	return replyCmd(&cobra.Command{Use: use, Short: short, Args: cobra.NoArgs}, g.call, subject, noRequest, text)
}

// noRequest is the request of a command whose subject takes none.
func noRequest([]string) (any, error) { return nil, nil }

// nameRequest is the request of a command whose one argument is the name
// of what it asks about.
func nameRequest(args []string) (any, error) { return control.NameRequest{Name: args[0]}, nil }

func addOutputFlag(cmd *cobra.Command, output *string) {
	cmd.Flags().StringVarP(output, "output", "o", "table", "output format: table or json")
}

// writeOutput writes v to w as indented JSON when output is "json", else
// with text.
func writeOutput[T any](w io.Writer, output string, v T, text func(io.Writer, T) error) error {
	if output == "json" {
		return writeJSON(w, v)
	}
	return text(w, v)
}

func writeJSON[T any](w io.Writer, v T) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeTable writes header and then row's line for each of rows, their
// tab-separated cells aligned in columns two spaces apart.
func writeTable[T any](w io.Writer, header string, rows []T, row func(io.Writer, T)) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		row(tw, r)
	}
	return tw.Flush()
}
