package principal_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/msgplatform/platform/internal/principal"
)

// install is an operator-mode installation in miniature: the platform
// admin account and one tenant's, each with a signing key, their account
// JWTs held as a resolver holds them (changed by the test).
type install struct {
	t        *testing.T
	op       nkeys.KeyPair
	mu       sync.Mutex
	accounts map[string]*jwt.AccountClaims
	admin    string
	adminSK  nkeys.KeyPair
	tenant   string
	tenantSK nkeys.KeyPair
	tenantKP nkeys.KeyPair
	now      time.Time
}

func newInstall(t *testing.T) *install {
	op, _ := nkeys.CreateOperator()
	in := &install{t: t, op: op, accounts: map[string]*jwt.AccountClaims{}, now: time.Now()}
	var last nkeys.KeyPair
	mk := func() (string, nkeys.KeyPair) {
		a, _ := nkeys.CreateAccount()
		last = a
		pub, _ := a.PublicKey()
		sk, _ := nkeys.CreateAccount()
		skPub, _ := sk.PublicKey()
		ac := jwt.NewAccountClaims(pub)
		ac.SigningKeys.Add(skPub)
		in.accounts[pub] = ac
		return pub, sk
	}
	in.admin, in.adminSK = mk()
	in.tenant, in.tenantSK = mk()
	in.tenantKP = last
	return in
}

func (in *install) verifier(strict bool) *principal.Verifier {
	v, err := principal.New(principal.Config{
		AdminAccount: in.admin,
		AccountJWT: func(_ context.Context, acc string) (string, error) {
			in.mu.Lock()
			defer in.mu.Unlock()
			ac := in.accounts[acc]
			if ac == nil {
				return "", errors.New("not found")
			}
			return ac.Encode(in.op)
		},
		Tenants: func(context.Context) ([]principal.Tenant, error) {
			return []principal.Tenant{{Name: "harbor", Account: in.tenant}}, nil
		},
		StrictSigningKeys: strict,
		Nonces:            3,
		Now:               func() time.Time { in.mu.Lock(); defer in.mu.Unlock(); return in.now },
	})
	if err != nil {
		in.t.Fatal(err)
	}
	return v
}

func (in *install) advance(d time.Duration) { in.mu.Lock(); in.now = in.now.Add(d); in.mu.Unlock() }

// user mints a user of account acc signed by signer.
func (in *install) user(name, acc string, signer nkeys.KeyPair, edit func(uc *jwt.UserClaims)) (*principal.Signer, string) {
	u, _ := nkeys.CreateUser()
	pub, _ := u.PublicKey()
	seed, _ := u.Seed()
	uc := jwt.NewUserClaims(pub)
	uc.Name = name
	if sp, _ := signer.PublicKey(); sp != acc {
		uc.IssuerAccount = acc
	}
	uc.IssuedAt = in.now.Add(-time.Minute).Unix()
	if edit != nil {
		edit(uc)
	}
	tok, err := uc.Encode(signer)
	if err != nil {
		in.t.Fatal(err)
	}
	creds, _ := jwt.FormatUserConfig(tok, seed)
	s, err := principal.NewSigner(creds)
	if err != nil {
		in.t.Fatal(err)
	}
	return s, pub
}

func (in *install) sign(s *principal.Signer) principal.Envelope {
	e, err := s.Sign("platform.v1.redrive.approve", []byte(`{"id":"rd-1"}`), in.now)
	if err != nil {
		in.t.Fatal(err)
	}
	return e
}

func TestVerify(t *testing.T) {
	in := newInstall(t)
	v := in.verifier(true)
	ctx := context.Background()
	verify := func(e principal.Envelope) (principal.Principal, error) {
		return v.Verify(ctx, "platform.v1.redrive.approve", e)
	}

	alice, _ := in.user("alice", in.admin, in.adminSK, nil)
	p, err := verify(in.sign(alice))
	if err != nil || p.Name() != "alice@platform" || !p.Operator {
		t.Fatalf("platform user: %+v, %v", p, err)
	}
	carol, carolKey := in.user("carol", in.tenant, in.tenantSK, nil)
	if p, err = verify(in.sign(carol)); err != nil || p.Name() != "carol@harbor" || p.MayAct("harbor") != nil || p.MayAct("meridian") == nil || p.MayAct("") == nil {
		t.Fatalf("tenant user: %+v, %v", p, err)
	}

	refusals := []struct {
		name string
		e    func() principal.Envelope
		want string
	}{
		{"expired user JWT", func() principal.Envelope {
			s, _ := in.user("old", in.admin, in.adminSK, func(uc *jwt.UserClaims) { uc.Expires = in.now.Add(-time.Second).Unix() })
			return in.sign(s)
		}, "expired"},
		{"identity-key user under strict signing keys", func() principal.Envelope {
			s, _ := in.user("raw", in.tenant, in.tenantKP, nil)
			return in.sign(s)
		}, "identity key"},
		{"user of an unknown account", func() principal.Envelope {
			a, _ := nkeys.CreateAccount()
			ap, _ := a.PublicKey()
			s, _ := in.user("stranger", ap, a, nil)
			return in.sign(s)
		}, "neither the platform admin account nor a tenant's"},
		{"signed by a key that is not the account's", func() principal.Envelope {
			sk, _ := nkeys.CreateAccount()
			s, _ := in.user("sneaky", in.tenant, sk, nil)
			return in.sign(s)
		}, "not a signing key of account"},
	}
	for _, r := range refusals {
		if _, err := verify(r.e()); !errors.Is(err, principal.ErrUnauthenticated) || !strings.Contains(err.Error(), r.want) {
			t.Errorf("%s: %v, want %q", r.name, err, r.want)
		}
	}

	// Revocation of one user, then of every user (suspension), seen
	// after the cache (1s) expires.
	// Revocations compare with a JWT's issue time, which jwt's Encode
	// takes from the real clock (not in.now): revoke as of the real now,
	// or a second boundary crossed since in.now was set leaves the user
	// issued after its revocation.
	in.mu.Lock()
	in.accounts[in.tenant].RevokeAt(carolKey, time.Now())
	in.mu.Unlock()
	in.advance(1100 * time.Millisecond)
	if _, err := verify(in.sign(carol)); err == nil || !strings.Contains(err.Error(), "is revoked") {
		t.Fatalf("revoked user: %v", err)
	}
	if err := v.Check(ctx, principal.Principal{User: "carol", UserKey: carolKey, Account: in.tenant, Tenant: "harbor", Issuer: mustPub(in.tenantSK), IssuedAt: in.now.Add(-time.Minute).Unix()}); err == nil {
		t.Fatal("Check passed a revoked user")
	}
	dave, _ := in.user("dave", in.tenant, in.tenantSK, nil)
	in.mu.Lock()
	in.accounts[in.tenant].RevokeAt(jwt.All, time.Now())
	in.mu.Unlock()
	in.advance(1100 * time.Millisecond)
	if _, err := verify(in.sign(dave)); err == nil || !strings.Contains(err.Error(), "suspension") {
		t.Fatalf("user of a suspended account: %v", err)
	}

	// The replay cache is bounded: full of live entries, it refuses new
	// requests rather than forgetting a nonce; they expire after MaxSkew.
	v = in.verifier(true)
	e := in.sign(alice)
	if _, err := verify(e); err != nil {
		t.Fatal(err)
	}
	if _, err := verify(e); err == nil || !strings.Contains(err.Error(), "replayed") {
		t.Fatalf("replayed envelope: %v", err)
	}
	for i := range 2 {
		if _, err := verify(in.sign(alice)); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if _, err := verify(in.sign(alice)); err == nil || !strings.Contains(err.Error(), "too many signed requests") {
		t.Fatalf("full replay cache: %v", err)
	}
	in.advance(3 * time.Minute)
	if _, err := verify(in.sign(alice)); err != nil {
		t.Fatalf("after the window: %v", err)
	}
}

func TestOpen(t *testing.T) {
	if _, ok := principal.Open([]byte(`{"id":"rd-1","actor":"auth"}`)); ok {
		t.Fatal("an unsigned body opened as an envelope")
	}
	b, _ := json.Marshal(principal.Envelope{Auth: &principal.Proof{JWT: "x"}, Body: []byte(`{"id":"rd-1"}`)})
	e, ok := principal.Open(b)
	if !ok || string(e.Body) != `{"id":"rd-1"}` {
		t.Fatalf("envelope: %+v %v", e, ok)
	}
	if _, err := principal.NewSigner([]byte("not creds")); !errors.Is(err, principal.ErrMalformed) {
		t.Fatalf("bad creds: %v", err)
	}
}

func mustPub(kp nkeys.KeyPair) string {
	p, _ := kp.PublicKey()
	return p
}

// Config.Record is asked after the local cache: a key it recorded before
// (another daemon saw the request) or a failure to record refuses.
func TestVerifyRecord(t *testing.T) {
	in := newInstall(t)
	var answer error
	v, err := principal.New(principal.Config{
		AdminAccount: in.admin,
		AccountJWT: func(_ context.Context, acc string) (string, error) {
			return in.accounts[acc].Encode(in.op)
		},
		Record: func(context.Context, string) error { return answer },
	})
	if err != nil {
		t.Fatal(err)
	}
	alice, _ := in.user("alice", in.admin, in.adminSK, nil)
	for _, tc := range []struct {
		answer error
		want   string
	}{{nil, ""}, {principal.ErrReplayed, "another platformd"}, {errors.New("no quorum"), "cannot record"}} {
		answer = tc.answer
		e, _ := alice.Sign("platform.v1.redrive.run", []byte(`{}`), time.Now())
		_, err := v.Verify(context.Background(), "platform.v1.redrive.run", e)
		if (tc.want == "" && err != nil) || (tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want))) {
			t.Errorf("record answers %v: %v, want %q", tc.answer, err, tc.want)
		}
	}
}
