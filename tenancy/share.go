package tenancy

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
)

// Sharing a topic between tenants is an explicit, platform-managed stream
// export and import:
//
//   - the owner's account exports the topic's stored subjects
//     (stored.TOPIC.*) as a private stream export (token required);
//   - the reader's account imports it with an activation token signed by
//     the owner's signing key and naming the reader's account only, under
//     SharedSubject(owner, TOPIC) = shared.OWNER.TOPIC.*;
//   - a reader's user gets it with --sub OWNER/TOPIC.
//
// Only the named tenant can import (the activation names its account, and
// account JWTs are signed by the platform alone), events carry the
// owner's Platform-Tenant stamp, and the share is live events (core
// subscription): a reader that wants them retained creates a topic of its
// own. Revoke removes the import (and the export when no reader is
// left); the servers stop the flow at once.

// Share is one topic of tenant From readable by tenant To.
type Share struct {
	From    string    `json:"from"`
	To      string    `json:"to"`
	Topic   string    `json:"topic"`
	Created time.Time `json:"created"`
	// Account of From and the activation token (a JWT, not a secret).
	FromAccount string `json:"from_account,omitempty"`
	Activation  string `json:"activation,omitempty"`
}

// ShareRequest asks for a share (or its revocation) on the control API.
type ShareRequest struct {
	Actor  string `json:"actor"`
	From   string `json:"from"`
	To     string `json:"to"`
	Topic  string `json:"topic"`
	Revoke bool   `json:"revoke,omitempty"`
}

// SharedSubject is where a reader tenant receives the events of topic of
// tenant from: shared.FROM.TOPIC.<key>.
func SharedSubject(from, topic string) string { return "shared." + from + "." + topic + ".*" }

func exportSubject(topic string) string { return StoredName(topic) + ".*" }

// shareClaims adds t's exports and imports to its account claims.
func shareClaims(t *Tenant, ac *jwt.AccountClaims) {
	for _, topic := range slices.Sorted(maps.Keys(t.Exports)) {
		if len(t.Exports[topic]) == 0 {
			continue
		}
		ac.Exports.Add(&jwt.Export{Name: "topic " + topic, Subject: jwt.Subject(exportSubject(topic)), Type: jwt.Stream, TokenReq: true})
	}
	for _, s := range t.Imports {
		ac.Imports.Add(&jwt.Import{Name: s.From + "/" + s.Topic, Subject: jwt.Subject(exportSubject(s.Topic)), Account: s.FromAccount,
			Token: s.Activation, LocalSubject: jwt.RenamingSubject(SharedSubject(s.From, s.Topic)), Type: jwt.Stream})
	}
	ac.Limits.Exports, ac.Limits.Imports = int64(len(ac.Exports)), int64(len(ac.Imports))
	ac.Limits.WildcardExports = len(ac.Exports) > 0
}

// ShareTopic lets tenant to read topic of tenant from (or, with revoke,
// stops it). Both account JWTs are pushed, both registry records written
// and the change is audited under both tenants.
func (m *Manager) ShareTopic(ctx context.Context, actor string, r ShareRequest) (Share, error) {
	for what, n := range map[string]string{"from tenant": r.From, "to tenant": r.To} {
		if err := ValidateName(what, n); err != nil {
			return Share{}, err
		}
	}
	if r.From == r.To {
		return Share{}, fmt.Errorf("%w: a tenant reads its own topics; share with another tenant", ErrInvalid)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.check(); err != nil {
		return Share{}, err
	}
	from, err := m.reg.get(ctx, r.From)
	if err != nil {
		return Share{}, err
	}
	to, err := m.reg.get(ctx, r.To)
	if err != nil {
		return Share{}, err
	}
	if from.Topics[r.Topic] == 0 {
		return Share{}, fmt.Errorf("%w: tenant %s has no topic %q (only topics can be shared)", ErrNotFound, r.From, r.Topic)
	}
	idx := slices.IndexFunc(to.Imports, func(s Share) bool { return s.From == r.From && s.Topic == r.Topic })
	nf, nt := clone(from), clone(to)
	var sh Share
	if r.Revoke {
		if idx < 0 {
			return Share{}, fmt.Errorf("%w: topic %s of %s is not shared with %s", ErrNotFound, r.Topic, r.From, r.To)
		}
		sh = to.Imports[idx]
		nt.Imports = slices.Delete(nt.Imports, idx, idx+1)
		nf.Exports[r.Topic] = slices.DeleteFunc(nf.Exports[r.Topic], func(s string) bool { return s == r.To })
		if len(nf.Exports[r.Topic]) == 0 {
			delete(nf.Exports, r.Topic)
		}
	} else {
		if idx >= 0 {
			return Share{}, fmt.Errorf("%w: topic %s of %s is already shared with %s", ErrConflict, r.Topic, r.From, r.To)
		}
		signer, err := m.signer(from)
		if err != nil {
			return Share{}, err
		}
		act := jwt.NewActivationClaims(to.Account)
		act.Name = r.From + "/" + r.Topic + " for " + r.To
		act.ImportSubject = jwt.Subject(exportSubject(r.Topic))
		act.ImportType = jwt.Stream
		act.IssuerAccount = from.Account
		tok, err := act.Encode(signer)
		if err != nil {
			return Share{}, fmt.Errorf("tenancy: activation: %w", err)
		}
		sh = Share{From: r.From, To: r.To, Topic: r.Topic, Created: time.Now().UTC(), FromAccount: from.Account, Activation: tok}
		nt.Imports = append(nt.Imports, sh)
		if nf.Exports == nil {
			nf.Exports = map[string][]string{}
		}
		nf.Exports[r.Topic] = append(nf.Exports[r.Topic], r.To)
	}
	now := time.Now().UTC()
	nf.Updated, nt.Updated = now, now
	// Export first, then import; undo in reverse on failure.
	ftok, err := m.accountJWT(nf)
	if err != nil {
		return Share{}, err
	}
	ttok, err := m.accountJWT(nt)
	if err != nil {
		return Share{}, err
	}
	undo := func(ts ...*Tenant) {
		for _, t := range ts {
			if tok, err := m.accountJWT(t); err == nil {
				_ = m.push(ctx, tok)
			}
		}
	}
	if r.Revoke { // stop the import before the export goes
		if err := m.push(ctx, ttok); err != nil {
			return Share{}, err
		}
		if err := m.push(ctx, ftok); err != nil {
			undo(to)
			return Share{}, err
		}
	} else {
		if err := m.push(ctx, ftok); err != nil {
			return Share{}, err
		}
		if err := m.push(ctx, ttok); err != nil {
			undo(from)
			return Share{}, err
		}
	}
	if err := m.reg.update(ctx, nf); err != nil {
		undo(from, to)
		return Share{}, err
	}
	if err := m.reg.update(ctx, nt); err != nil {
		// Put the owner's record back (best effort) and the JWTs.
		back := clone(from)
		back.revision = nf.revision
		_ = m.reg.update(ctx, back)
		undo(from, to)
		return Share{}, err
	}
	action := "share.grant"
	if r.Revoke {
		action = "share.revoke"
	}
	target := r.To + ":" + r.Topic
	pub := sh
	pub.Activation = ""
	for _, tn := range []string{r.From, r.To} {
		_ = m.appendAudit(ctx, Record{Actor: actor, Action: action, Tenant: tn, Target: target,
			Detail: fmt.Sprintf("topic %s of %s readable by %s on %s: %v", r.Topic, r.From, r.To, SharedSubject(r.From, r.Topic), !r.Revoke),
			After:  pub})
	}
	return pub, nil
}

// Shares lists every share (of tenant name, as owner or reader, or all
// for "").
func (m *Manager) Shares(ctx context.Context, name string) ([]Share, error) {
	ts, err := m.List(ctx)
	if err != nil {
		return nil, err
	}
	var out []Share
	for _, t := range ts {
		for _, s := range t.Imports {
			if name == "" || s.From == name || s.To == name {
				s.Activation = ""
				out = append(out, s)
			}
		}
	}
	slices.SortFunc(out, func(a, b Share) int {
		return strings.Compare(a.From+"/"+a.Topic+"/"+a.To, b.From+"/"+b.Topic+"/"+b.To)
	})
	return out, nil
}

// importOf returns t's import of "FROM/TOPIC".
func importOf(t *Tenant, name string) (Share, bool) {
	from, topic, ok := strings.Cut(name, "/")
	if !ok {
		return Share{}, false
	}
	for _, s := range t.Imports {
		if s.From == from && s.Topic == topic {
			return s, true
		}
	}
	return Share{}, false
}
