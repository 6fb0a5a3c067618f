package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/msgplatform/platform/internal/validate"
	"github.com/msgplatform/platform/redrive"
)

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	if _, ok := c.ss.read(r); ok {
		http.Redirect(w, r, "/console/", http.StatusSeeOther)
		return
	}
	c.render(w, r, http.StatusOK, "login", view{Title: "Sign in", Data: safeNext(r.FormValue("next"))})
}

// safeNext keeps a post-login redirect inside the console.
func safeNext(next string) string {
	if !strings.HasPrefix(next, Prefix) || strings.Contains(next, "//") || strings.Contains(next, "\\") {
		return Prefix
	}
	return next
}

// login checks the pasted or uploaded .creds with the broker and starts a
// session for the user it authenticates.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	// The body is bounded to MaxLoginBytes (Handler), so the whole form,
	// file part included, is read into memory: nothing spools to disk.
	if err := r.ParseMultipartForm(MaxLoginBytes); err != nil && !errors.Is(err, http.ErrNotMultipart) {
		c.render(w, r, formStatus(err), "login", view{Title: "Sign in", Error: "cannot read the form: " + formError(err, MaxLoginBytes), Data: Prefix})
		return
	}
	creds := r.PostFormValue("creds")
	if f, _, err := r.FormFile("credsfile"); err == nil {
		b, rerr := io.ReadAll(io.LimitReader(f, MaxLoginBytes))
		_ = f.Close()
		if rerr == nil && len(strings.TrimSpace(string(b))) > 0 {
			creds = string(b)
		}
	}
	next := safeNext(r.PostFormValue("next"))
	s, err := c.authenticate(r.Context(), creds)
	if err != nil {
		c.render(w, r, statusOf(err), "login", view{Title: "Sign in", Error: "sign-in refused: " + err.Error(), Data: next})
		return
	}
	s = c.ss.issue(w, r, s)
	c.log.Info("console: signed in", "principal", s.Principal(), "account", s.Account)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request, s Session) {
	c.endSession(w, r, s, "logout")
	http.Redirect(w, r, "/console/login", http.StatusSeeOther)
}

// page serves a read-only page of the session's scope: fn gets the
// scope's redrive service and returns the template to render and its view;
// page fills in the session and the scope and renders it (200), or shows
// the error page when the scope's service or fn fails.
func (c *Console) page(fn func(r *http.Request, svc *redrive.Guard) (string, view, error)) func(http.ResponseWriter, *http.Request, Session) {
	return func(w http.ResponseWriter, r *http.Request, s Session) {
		scope, svc, err := c.service(r, s)
		var name string
		var v view
		if err == nil {
			name, v, err = fn(r, svc)
		}
		if err != nil {
			c.fail(w, r, &s, 0, err)
			return
		}
		v.S, v.Scope = &s, scope
		c.render(w, r, http.StatusOK, name, v)
	}
}

func (c *Console) dlqs(r *http.Request, svc *redrive.Guard) (string, view, error) {
	list, err := svc.ListDLQs(r.Context())
	return "dlqs", view{Title: "Dead-letter queues", Data: list}, err
}

type dlqPage struct {
	DLQ     redrive.DLQ
	Entries []redrive.Entry
	Filter  redrive.EntryFilter
}

func uintParam(r *http.Request, name string) (uint64, error) {
	v := strings.TrimSpace(r.FormValue(name))
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s must be a whole number, got %q", redrive.ErrInvalid, name, v)
	}
	return n, nil
}

func (c *Console) dlq(r *http.Request, svc *redrive.Guard) (string, view, error) {
	name := r.FormValue("name")
	d, err := svc.DescribeDLQ(r.Context(), name)
	if err != nil {
		return "", view{}, err
	}
	f := redrive.EntryFilter{DLQ: name, Fingerprint: strings.TrimSpace(r.FormValue("fingerprint")), Limit: 200}
	if f.FromSeq, err = uintParam(r, "from_seq"); err == nil {
		f.ToSeq, err = uintParam(r, "to_seq")
	}
	if err != nil {
		return "", view{}, err
	}
	entries, err := svc.Entries(r.Context(), f)
	return "dlq", view{Title: "DLQ " + d.Name, Data: dlqPage{DLQ: d, Entries: entries, Filter: f}}, err
}

type entryPage struct {
	DLQ     string
	Entry   redrive.Entry
	Payload string
	Binary  bool
}

func (c *Console) entry(r *http.Request, svc *redrive.Guard) (string, view, error) {
	seq, err := uintParam(r, "seq")
	if err != nil {
		return "", view{}, err
	}
	e, err := svc.Show(r.Context(), r.FormValue("dlq"), seq)
	if err != nil {
		return "", view{}, err
	}
	p := entryPage{DLQ: r.FormValue("dlq"), Entry: e, Payload: string(e.Payload)}
	if !isText(e.Payload) {
		p.Payload, p.Binary = fmt.Sprintf("%x", e.Payload), true
	}
	return "entry", view{Title: fmt.Sprintf("Entry %d of %s", seq, p.DLQ), Data: p}, nil
}

func isText(b []byte) bool {
	for _, r := range string(b) {
		if r == '\uFFFD' || (r < 0x20 && r != '\n' && r != '\r' && r != '\t') {
			return false
		}
	}
	return true
}

type groupsPage struct {
	DLQ    redrive.DLQ
	Groups []redrive.Group
}

func (c *Console) groups(r *http.Request, svc *redrive.Guard) (string, view, error) {
	name := r.FormValue("dlq")
	d, err := svc.DescribeDLQ(r.Context(), name)
	if err != nil {
		return "", view{}, err
	}
	gs, err := svc.Groups(r.Context(), redrive.EntryFilter{DLQ: name})
	return "groups", view{Title: "Fingerprint groups of " + d.Name, Data: groupsPage{DLQ: d, Groups: gs}}, err
}

type requestsPage struct {
	List []redrive.Status
	DLQ  string
}

func (c *Console) requests(r *http.Request, svc *redrive.Guard) (string, view, error) {
	list, err := svc.List(r.Context(), redrive.ListFilter{DLQ: r.FormValue("dlq")})
	return "requests", view{Title: "Redrive requests", Data: requestsPage{List: list, DLQ: r.FormValue("dlq")}}, err
}

// parseRequest reads the request form; the requester is the session's
// principal, never a field.
func parseRequest(r *http.Request, s Session) (redrive.Request, error) {
	var p validate.Problems
	req := redrive.Request{
		DLQ: strings.TrimSpace(r.PostFormValue("dlq")), Destination: strings.TrimSpace(r.PostFormValue("destination")),
		Reason: strings.TrimSpace(r.PostFormValue("reason")), Requester: s.Principal(), Authenticated: true,
	}
	num := func(name string, fn func(v string) error) {
		if v := strings.TrimSpace(r.PostFormValue(name)); v != "" {
			if err := fn(v); err != nil {
				p.Addf(name, "must be a number, got %q", v)
			}
		}
	}
	var err error
	num("rate", func(v string) error { req.Rate, err = strconv.ParseFloat(v, 64); return err })
	num("sample_size", func(v string) error { req.SampleSize, err = strconv.Atoi(v); return err })
	num("max_failure_rate", func(v string) error { req.MaxFailureRate, err = strconv.ParseFloat(v, 64); return err })
	num("sample_window", func(v string) error {
		secs, err := strconv.ParseFloat(v, 64)
		req.SampleWindow = time.Duration(secs * float64(time.Second))
		return err
	})
	sel := &req.Selection
	switch mode := r.PostFormValue("mode"); mode {
	case "all":
		sel.All = true
	case "range":
		num("from_seq", func(v string) error { sel.FromSeq, err = strconv.ParseUint(v, 10, 64); return err })
		num("to_seq", func(v string) error { sel.ToSeq, err = strconv.ParseUint(v, 10, 64); return err })
		if sel.FromSeq == 0 && sel.ToSeq == 0 {
			p.Addf("from_seq", "give a sequence range (from and/or to)")
		}
	case "fingerprint":
		sel.Fingerprint = strings.TrimSpace(r.PostFormValue("fingerprint"))
		if sel.Fingerprint == "" {
			p.Addf("fingerprint", "give the 12-digit fingerprint of a group")
		}
	case "seqs":
		for _, f := range strings.FieldsFunc(r.PostFormValue("seqs"), func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\r' || r == '\t' }) {
			q, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				p.Addf("seqs", "must be DLQ sequences separated by commas, got %q", f)
				continue
			}
			sel.Seqs = append(sel.Seqs, q)
		}
		if len(sel.Seqs) == 0 && p.Err(nil) == nil {
			p.Addf("seqs", "list at least one DLQ sequence")
		}
	default:
		p.Addf("mode", "choose a selection: all, range, fingerprint or seqs, got %q", mode)
	}
	if err := p.Err(redrive.ErrInvalid); err != nil {
		return req, err
	}
	return req, nil
}

func (c *Console) submit(w http.ResponseWriter, r *http.Request, s Session) {
	scope, svc, err := c.service(r, s)
	if err != nil {
		c.fail(w, r, &s, 0, err)
		return
	}
	req, err := parseRequest(r, s)
	if err == nil {
		var st redrive.Status
		st, err = svc.Submit(r.Context(), req)
		if err == nil {
			http.Redirect(w, r, "/console/request?id="+url.QueryEscape(st.ID)+"&scope="+url.QueryEscape(scope), http.StatusSeeOther)
			return
		}
	}
	c.fail(w, r, &s, 0, err)
}

func (c *Console) request(r *http.Request, svc *redrive.Guard) (string, view, error) {
	st, err := svc.Get(r.Context(), r.FormValue("id"))
	return "request", view{Title: "Redrive " + st.ID, Notice: r.FormValue("done"), Data: st}, err
}

// action approves, rejects, runs, pauses, resumes or cancels a request as
// the session's principal. A refusal (the four-eyes rule, a lost race,
// a wrong state) is shown on the request's page with its reason.
func (c *Console) action(w http.ResponseWriter, r *http.Request, s Session) {
	scope, svc, err := c.service(r, s)
	if err != nil {
		c.fail(w, r, &s, 0, err)
		return
	}
	id, note := r.PostFormValue("id"), strings.TrimSpace(r.PostFormValue("note"))
	ctx := r.Context()
	fn, ok := map[string]func(ctx context.Context, id, actor, note string) (redrive.Status, error){
		"approve": svc.Approve, "reject": svc.Reject, "run": svc.Run, "pause": svc.Pause, "resume": svc.Resume, "cancel": svc.Cancel,
	}[r.PostFormValue("op")]
	if !ok {
		c.fail(w, r, &s, http.StatusBadRequest, fmt.Errorf("console: unknown action %q (approve, reject, run, pause, resume, cancel)", r.PostFormValue("op")))
		return
	}
	if _, err := fn(ctx, id, s.Principal(), note); err != nil {
		st, gerr := svc.Get(ctx, id)
		if gerr != nil {
			c.fail(w, r, &s, 0, err)
			return
		}
		c.render(w, r, statusOf(err), "request", view{Title: "Redrive " + st.ID, S: &s, Scope: scope, Error: "refused: " + err.Error(), Data: st})
		return
	}
	http.Redirect(w, r, "/console/request?id="+url.QueryEscape(id)+"&scope="+url.QueryEscape(scope)+"&done="+url.QueryEscape(r.PostFormValue("op")), http.StatusSeeOther)
}

// Progress is what the request page polls.
type Progress struct {
	ID          string  `json:"id"`
	State       string  `json:"state"`
	Phase       string  `json:"phase"`
	Sent        int     `json:"sent"`
	Total       int     `json:"total"`
	Skipped     int     `json:"skipped"`
	Refailed    int     `json:"refailed"`
	Rate        float64 `json:"rate"`
	ETA         string  `json:"eta"`
	PauseReason string  `json:"pause_reason,omitempty"`
	Error       string  `json:"error,omitempty"`
	Terminal    bool    `json:"terminal"`
}

func (c *Console) statusJSON(w http.ResponseWriter, r *http.Request, s Session) {
	_, svc, err := c.service(r, s)
	if err == nil {
		var st redrive.Status
		if st, err = svc.Get(r.Context(), r.FormValue("id")); err == nil {
			p := Progress{ID: st.ID, State: string(st.State), Phase: st.Progress.Phase, Sent: st.Progress.Sent, Total: st.Total,
				Skipped: st.Progress.Skipped, Refailed: st.Progress.Refailed, Rate: st.Rate, PauseReason: st.PauseReason,
				Error: st.Error, Terminal: st.State.Terminal()}
			if st.ETA > 0 {
				p.ETA = st.ETA.Round(time.Second).String()
			}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Cache-Control", "no-store")
			_ = json.NewEncoder(w).Encode(p)
			return
		}
	}
	http.Error(w, err.Error(), statusOf(err))
}

func (c *Console) history(r *http.Request, svc *redrive.Guard) (string, view, error) {
	recs, err := svc.History(r.Context(), redrive.HistoryFilter{ID: r.FormValue("id"), Limit: 300})
	// Newest first.
	for i, j := 0, len(recs)-1; i < j; i, j = i+1, j-1 {
		recs[i], recs[j] = recs[j], recs[i]
	}
	return "history", view{Title: "Audit history", Data: recs}, err
}
