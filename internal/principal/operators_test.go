package principal_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/msgplatform/platform/internal/principal"
)

// Config.RevokedOperator is asked for platform admin account users only:
// a key the registry lists as revoked is refused with who revoked it and
// when, even though the account JWT does not list it; a registry that
// cannot be read refuses (fail closed); tenant users are not looked up.
func TestVerifyRevokedOperator(t *testing.T) {
	in := newInstall(t)
	at := time.Date(2026, 11, 29, 18, 0, 0, 0, time.UTC)
	revoked := map[string]principal.Operator{}
	var regErr error
	var asked []string
	v, err := principal.New(principal.Config{
		AdminAccount: in.admin,
		AccountJWT: func(_ context.Context, acc string) (string, error) {
			return in.accounts[acc].Encode(in.op)
		},
		Tenants: func(context.Context) ([]principal.Tenant, error) {
			return []principal.Tenant{{Name: "harbor", Account: in.tenant}}, nil
		},
		RevokedOperator: func(_ context.Context, key string) (principal.Operator, bool, error) {
			asked = append(asked, key)
			op, ok := revoked[key]
			return op, ok, regErr
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	verify := func(s *principal.Signer) (principal.Principal, error) {
		e, err := s.Sign("platform.v1.redrive.approve", []byte(`{}`), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return v.Verify(ctx, "platform.v1.redrive.approve", e)
	}
	alice, _ := in.user("alice", in.admin, in.adminSK, nil)
	bob, bobKey := in.user("bob", in.admin, in.adminSK, nil)
	carol, _ := in.user("carol", in.tenant, in.tenantSK, nil)
	revoked[bobKey] = principal.Operator{Name: "bob", PublicKey: bobKey, Revoked: &at, RevokedBy: "alice@platform"}

	if p, err := verify(alice); err != nil || p.Name() != "alice@platform" {
		t.Fatalf("alice: %+v, %v", p, err)
	}
	_, err = verify(bob)
	if !errors.Is(err, principal.ErrUnauthenticated) || !strings.Contains(err.Error(), "platform operator bob@platform ("+bobKey+") was revoked at 2026-11-29T18:00:00Z by alice@platform") {
		t.Fatalf("revoked bob: %v", err)
	}
	if _, err := v.Identify(ctx, mustJWT(t, bob)); err == nil || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("Identify of revoked bob (console sign-in): %v", err)
	}
	n := len(asked)
	if _, err := verify(carol); err != nil || len(asked) != n {
		t.Fatalf("tenant user: %v; registry asked %d times, want 0", err, len(asked)-n)
	}
	regErr = errors.New("no quorum")
	if _, err := verify(alice); !errors.Is(err, principal.ErrUnauthenticated) || !strings.Contains(err.Error(), "cannot read the operator registry") {
		t.Fatalf("registry unreadable: %v, want a refusal", err)
	}
}

func mustJWT(t *testing.T, s *principal.Signer) string {
	e, err := s.Sign("x", nil, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return e.Auth.JWT
}

func TestValidateOperatorName(t *testing.T) {
	for _, ok := range []string{"alice", "ops-1", "a"} {
		if err := principal.ValidateOperatorName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for name, want := range map[string]string{
		"":                      "want 1-63 lower-case",
		"Alice":                 "want 1-63 lower-case",
		"-x":                    "want 1-63 lower-case",
		"a.b":                   "want 1-63 lower-case",
		"admin":                 "reserved for the bootstrap admin",
		strings.Repeat("a", 64): "want 1-63 lower-case",
		"alice@platform":        "want 1-63 lower-case",
	} {
		if err := principal.ValidateOperatorName(name); !errors.Is(err, principal.ErrMalformed) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", name, err, want)
		}
	}
}

func TestParseExpiry(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"90d": 90 * 24 * time.Hour, "1d": 24 * time.Hour, "720h": 720 * time.Hour, "2h30m": 150 * time.Minute,
		"2s": 2 * time.Second, " 30d ": 30 * 24 * time.Hour, "0": 0, "0d": 0, "0s": 0,
	} {
		if got, err := principal.ParseExpiry(in); err != nil || got != want {
			t.Errorf("ParseExpiry(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"", "abc", "90", "-1d", "-5m", "1.5d", "d", "500ms", "90days", "999999999999d"} {
		if got, err := principal.ParseExpiry(in); !errors.Is(err, principal.ErrMalformed) || !strings.Contains(err.Error(), "want a number of days") && !strings.Contains(err.Error(), "too long") {
			t.Errorf("ParseExpiry(%q) = %s, %v; want an ErrMalformed saying what is accepted", in, got, err)
		}
	}
}

// A request without an expiry gets the default (an older platformctl
// does not mint credentials that never expire); never only when asked.
func TestOperatorAddRequestExpiry(t *testing.T) {
	for _, c := range []struct {
		r    principal.OperatorAddRequest
		want time.Duration
		err  string
	}{
		{principal.OperatorAddRequest{}, principal.DefaultOperatorExpiry, ""},
		{principal.OperatorAddRequest{ExpiresIn: time.Hour}, time.Hour, ""},
		{principal.OperatorAddRequest{NeverExpires: true}, 0, ""},
		{principal.OperatorAddRequest{NeverExpires: true, ExpiresIn: time.Hour}, 0, "both set"},
		{principal.OperatorAddRequest{ExpiresIn: -time.Hour}, 0, "at least 1s"},
		{principal.OperatorAddRequest{ExpiresIn: time.Millisecond}, 0, "at least 1s"},
	} {
		got, err := c.r.Expiry()
		if c.err != "" {
			if !errors.Is(err, principal.ErrMalformed) || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%+v: %v, want an error containing %q", c.r, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%+v: %s, %v; want %s", c.r, got, err, c.want)
		}
	}
}
