package principaltest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/msgplatform/platform/embeddednats"
)

// PlatformUser returns the .creds of a new user name of the platform
// admin account, signed by its signing key (as the admin user is): a
// platform operator, principal name@platform.
func PlatformUser(t testing.TB, trust *embeddednats.Trust, name string) []byte {
	t.Helper()
	sk, err := nkeys.FromSeed([]byte(trust.AdminAccountSigningSeed))
	if err != nil {
		t.Fatalf("principaltest: admin signing key: %v", err)
	}
	u, _ := nkeys.CreateUser()
	pub, _ := u.PublicKey()
	seed, _ := u.Seed()
	uc := jwt.NewUserClaims(pub)
	uc.Name = name
	uc.IssuerAccount = trust.AdminAccount()
	tok, err := uc.Encode(sk)
	if err != nil {
		t.Fatalf("principaltest: encode user %s: %v", name, err)
	}
	creds, err := jwt.FormatUserConfig(tok, seed)
	if err != nil {
		t.Fatal(err)
	}
	return creds
}

// WriteCreds writes creds to a 0600 file in a test directory and returns
// its path.
func WriteCreds(t testing.TB, name string, creds []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name+".creds")
	if err := os.WriteFile(p, creds, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
