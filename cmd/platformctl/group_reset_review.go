package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/redrive"
)

// resetReviewFlags are group reset's approval workflow (redrive/reset.go).
type resetReviewFlags struct {
	request                bool
	approve, execute, show string
	reason, as             string
	userCreds              string
}

func (r *resetReviewFlags) bind(cmd *cobra.Command) {
	f := cmd.Flags()
	f.BoolVar(&r.request, "request", false, "ask for the reset instead of running it (topics marked review: required); prints the request id")
	f.StringVar(&r.approve, "approve", "", "approve reset request ID (not as its requester)")
	f.StringVar(&r.execute, "execute", "", "run approved reset request ID (once)")
	f.StringVar(&r.show, "show", "", "show reset request ID")
	f.StringVar(&r.reason, "reason", "", "why (required with --request; recorded in the audit log)")
	userCredsFlag(f, &r.userCreds)
	f.StringVar(&r.as, "as", actor(), "label of an unsigned direct reset (deprecated: use --user-creds)")
	_ = f.MarkDeprecated("as", "sign with --user-creds FILE instead; --as is recorded as unauthenticated:<name>")
}

// id is the request id of --approve, --execute or --show ("" for none).
func (r *resetReviewFlags) id() string {
	for _, id := range []string{r.approve, r.execute, r.show} {
		if id != "" {
			return id
		}
	}
	return ""
}

func (r *resetReviewFlags) validate() error {
	n := 0
	for _, set := range []bool{r.request, r.approve != "", r.execute != "", r.show != ""} {
		if set {
			n++
		}
	}
	if n > 1 {
		return errors.New("give at most one of --request, --approve, --execute, --show")
	}
	if r.request && r.reason == "" {
		return errors.New("--request needs --reason: say why the group is moved")
	}
	return nil
}

func (r *resetReviewFlags) submit(cmd *cobra.Command, g *globalOptions, req catalog.GroupResetRequest, output string) error {
	var out redrive.ResetRequest
	if err := g.callAs(cmd.Context(), r.userCreds, redrive.SubjResetRequest, redrive.ResetRequestBody{Reset: req, By: r.as, Reason: r.reason}, &out); err != nil {
		return err
	}
	return writeOutput(cmd.OutOrStdout(), output, out, func(w io.Writer, out redrive.ResetRequest) error {
		err := writeResetRequest(w, out)
		fmt.Fprintf(w, "next: someone other than %s runs `platformctl group reset --approve %s`\n", out.Requester, out.ID)
		return err
	})
}

func (r *resetReviewFlags) decide(cmd *cobra.Command, g *globalOptions, output string) error {
	w := cmd.OutOrStdout()
	body := redrive.ResetDecision{ID: r.id(), By: r.as, Reason: r.reason}
	if r.execute != "" {
		var out catalog.GroupReset
		if err := g.callAs(cmd.Context(), r.userCreds, redrive.SubjResetExecute, body, &out); err != nil {
			return err
		}
		return writeOutput(w, output, out, writeGroupReset)
	}
	subj, creds := redrive.SubjResetShow, ""
	if r.approve != "" {
		subj, creds = redrive.SubjResetApprove, r.userCreds
	}
	var out redrive.ResetRequest
	if err := g.callAs(cmd.Context(), creds, subj, body, &out); err != nil {
		return err
	}
	return writeOutput(w, output, out, writeResetRequest)
}

func writeResetRequest(w io.Writer, r redrive.ResetRequest) error {
	fmt.Fprintf(w, "reset request %s: %s\n", r.ID, r.State)
	target := "start"
	switch {
	case r.Reset.ToEnd:
		target = "end"
	case r.Reset.ToTime != nil:
		target = r.Reset.ToTime.UTC().Format("2006-01-02T15:04:05Z07:00")
	}
	fmt.Fprintf(w, "  group %s (topic %q) to %s\n", r.Reset.Group, r.Reset.Topic, target)
	fmt.Fprintf(w, "  requested by %s: %s\n", r.Requester, r.Reason)
	if r.Approver != "" {
		fmt.Fprintf(w, "  approved by %s: %s\n", r.Approver, r.ApproveReason)
	}
	if r.Executor != "" {
		fmt.Fprintf(w, "  executed by %s\n", r.Executor)
	}
	if r.Result != nil {
		fmt.Fprintf(w, "  %d events to process after the reset\n", r.Result.ToProcess)
	}
	if r.Error != "" {
		fmt.Fprintf(w, "  failed: %s\n", r.Error)
	}
	return nil
}
