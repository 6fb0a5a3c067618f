package embeddednats

import (
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// Account names of the platform's own accounts.
const (
	SystemAccountName = "SYS"
	AdminAccountName  = "PLATFORM"
	OperatorName      = "platform"
)

// trustFile is the name of the file, under the trust directory, holding the
// operator material. It is written 0600.
const trustFile = "trust.json"

// Trust is the operator-mode material every node of an installation
// shares: the operator (identity and signing key), the system account and
// the platform admin account with its admin user. Account JWTs are signed
// by the operator's signing key, never by its identity key, so the identity
// key can be kept offline later.
type Trust struct {
	OperatorSeed        string `json:"operator_seed"`
	OperatorSigningSeed string `json:"operator_signing_seed"`
	OperatorJWT         string `json:"operator_jwt"`

	SystemAccountSeed string `json:"system_account_seed"`
	SystemAccountJWT  string `json:"system_account_jwt"`
	SystemUserSeed    string `json:"system_user_seed"`
	SystemUserJWT     string `json:"system_user_jwt"`

	AdminAccountSeed        string `json:"admin_account_seed"`
	AdminAccountSigningSeed string `json:"admin_account_signing_seed"`
	AdminAccountJWT         string `json:"admin_account_jwt"`
	AdminUserSeed           string `json:"admin_user_seed"`
	AdminUserJWT            string `json:"admin_user_jwt"`

	// ClientTLS is the TLS the platform's own connections (Connect,
	// ConnectAdmin, ConnectSystem, the tenancy runtime and ingest) dial
	// the nodes' client ports with; nil when those ports are plaintext.
	// It is not part of trust.json: whoever runs the nodes sets it from
	// their TLS (Node.ClientTLS).
	ClientTLS *tls.Config `json:"-"`
}

// routeUser is the user name routes authenticate with.
const routeUser = "platform-route"

// RouteCredentials are the user and password every node's routes
// authenticate with, derived from the operator signing seed: the same on
// every node holding the installation's trust.json, known to no one
// without it.
func (t *Trust) RouteCredentials() (user, pass string, err error) {
	raw, err := hkdf.Key(sha256.New, []byte(t.OperatorSigningSeed), nil, "msgplatform route credentials v1", 32)
	if err != nil {
		return "", "", fmt.Errorf("embeddednats: derive route credentials: %w", err)
	}
	return routeUser, base64.RawURLEncoding.EncodeToString(raw), nil
}

// LoadOrCreateTrust reads dir/trust.json, creating it (0600, dir 0700)
// with fresh keys when it does not exist.
func LoadOrCreateTrust(dir string) (*Trust, error) {
	t, err := LoadTrust(dir)
	if err == nil || !errors.Is(err, ErrNoTrust) {
		return t, err
	}
	t, err = NewTrust()
	if err != nil {
		return nil, err
	}
	if err := t.Save(dir); err != nil {
		return nil, err
	}
	return t, nil
}

// LoadTrust reads dir/trust.json. It returns ErrNoTrust when the file does
// not exist.
func LoadTrust(dir string) (*Trust, error) {
	b, err := os.ReadFile(filepath.Join(dir, trustFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w in %s", ErrNoTrust, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("embeddednats: read trust: %w", err)
	}
	var t Trust
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, fmt.Errorf("embeddednats: %s: %w", filepath.Join(dir, trustFile), err)
	}
	if err := t.check(); err != nil {
		return nil, fmt.Errorf("embeddednats: %s: %w", filepath.Join(dir, trustFile), err)
	}
	if err := t.ensureSystemSigningKey(); err != nil {
		return nil, err
	}
	return &t, nil
}

// Save writes the trust material to dir/trust.json with mode 0600.
func (t *Trust) Save(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("embeddednats: trust dir: %w", err)
	}
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return err
	}
	return WriteFileAtomic(filepath.Join(dir, trustFile), b, 0o600)
}

// NewTrust generates a fresh operator, system account and admin account.
func NewTrust() (*Trust, error) {
	var t Trust
	op, err := newSignedKeys(nkeys.CreateOperator)
	if err != nil {
		return nil, err
	}
	t.OperatorSeed, t.OperatorSigningSeed = op.idSeed, op.signingSeed

	sys, sysSeed, err := newKey(nkeys.CreateAccount)
	if err != nil {
		return nil, err
	}
	t.SystemAccountSeed = sysSeed
	sysPub, _ := sys.PublicKey()

	oc := jwt.NewOperatorClaims(op.idPub)
	oc.Name = OperatorName
	oc.SigningKeys.Add(op.signingPub)
	oc.SystemAccount = sysPub
	oc.StrictSigningKeyUsage = true
	if t.OperatorJWT, err = oc.Encode(op.id); err != nil {
		return nil, fmt.Errorf("embeddednats: encode operator: %w", err)
	}

	sc := jwt.NewAccountClaims(sysPub)
	sc.Name = SystemAccountName
	sc.Exports = jwt.Exports{
		&jwt.Export{Name: "account-monitoring-services", Subject: "$SYS.REQ.ACCOUNT.*.*", Type: jwt.Service, ResponseType: jwt.ResponseTypeStream, AccountTokenPosition: 4},
		&jwt.Export{Name: "account-monitoring-streams", Subject: "$SYS.ACCOUNT.*.>", Type: jwt.Stream, AccountTokenPosition: 3},
	}
	if t.SystemAccountJWT, err = sc.Encode(op.signing); err != nil {
		return nil, fmt.Errorf("embeddednats: encode system account: %w", err)
	}
	if t.SystemUserSeed, t.SystemUserJWT, err = newUser("sys", sys, sysPub); err != nil {
		return nil, err
	}

	adm, err := newSignedKeys(nkeys.CreateAccount)
	if err != nil {
		return nil, err
	}
	t.AdminAccountSeed, t.AdminAccountSigningSeed = adm.idSeed, adm.signingSeed
	ac := jwt.NewAccountClaims(adm.idPub)
	ac.Name = AdminAccountName
	ac.SigningKeys.Add(adm.signingPub)
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{
		MemoryStorage: jwt.NoLimit, DiskStorage: jwt.NoLimit,
		Streams: jwt.NoLimit, Consumer: jwt.NoLimit, MaxAckPending: jwt.NoLimit,
	}
	if t.AdminAccountJWT, err = ac.Encode(op.signing); err != nil {
		return nil, fmt.Errorf("embeddednats: encode admin account: %w", err)
	}
	if t.AdminUserSeed, t.AdminUserJWT, err = newUser("admin", adm.signing, adm.idPub); err != nil {
		return nil, err
	}
	if err := t.ensureSystemSigningKey(); err != nil {
		return nil, err
	}
	return &t, t.check()
}

// ensureSystemSigningKey makes the system user usable under
// StrictSigningKeyUsage, which refuses users signed by an account's
// identity key: the system account gets a signing key derived from its
// seed (so every node holding the same trust.json derives the same key)
// and the system user is issued by it. Trust files written before this
// are upgraded in memory at load.
func (t *Trust) ensureSystemSigningKey() error {
	raw, err := hkdf.Key(sha256.New, []byte(t.SystemAccountSeed), nil, "msgplatform system account signing key v1", 32)
	if err != nil {
		return fmt.Errorf("embeddednats: derive system signing key: %w", err)
	}
	seed, err := nkeys.EncodeSeed(nkeys.PrefixByteAccount, raw)
	if err != nil {
		return fmt.Errorf("embeddednats: system signing key: %w", err)
	}
	sk, err := nkeys.FromSeed(seed)
	if err != nil {
		return fmt.Errorf("embeddednats: system signing key: %w", err)
	}
	skPub, _ := sk.PublicKey()
	sc, err := jwt.DecodeAccountClaims(t.SystemAccountJWT)
	if err != nil {
		return fmt.Errorf("embeddednats: system_account_jwt: %w", err)
	}
	if uc, err := jwt.DecodeUserClaims(t.SystemUserJWT); err == nil && sc.SigningKeys.Contains(skPub) && uc.Issuer == skPub {
		return nil
	}
	if !sc.SigningKeys.Contains(skPub) {
		opSK, err := t.OperatorSigningKey()
		if err != nil {
			return fmt.Errorf("embeddednats: operator signing key: %w", err)
		}
		sc.SigningKeys.Add(skPub)
		if t.SystemAccountJWT, err = sc.Encode(opSK); err != nil {
			return fmt.Errorf("embeddednats: encode system account: %w", err)
		}
	}
	t.SystemUserSeed, t.SystemUserJWT, err = newUser("sys", sk, sc.Subject)
	return err
}

func newKey(create func() (nkeys.KeyPair, error)) (nkeys.KeyPair, string, error) {
	kp, err := create()
	if err != nil {
		return nil, "", fmt.Errorf("embeddednats: create key: %w", err)
	}
	seed, err := kp.Seed()
	if err != nil {
		return nil, "", err
	}
	return kp, string(seed), nil
}

// signedKeys are an identity key and the signing key that signs on its
// behalf, of one kind (operator or account), with their seeds and public
// keys.
type signedKeys struct {
	id, signing         nkeys.KeyPair
	idSeed, signingSeed string
	idPub, signingPub   string
}

// newSignedKeys creates an identity key and its signing key with create.
func newSignedKeys(create func() (nkeys.KeyPair, error)) (signedKeys, error) {
	var k signedKeys
	var err error
	if k.id, k.idSeed, err = newKey(create); err != nil {
		return k, err
	}
	if k.signing, k.signingSeed, err = newKey(create); err != nil {
		return k, err
	}
	k.idPub, _ = k.id.PublicKey()
	k.signingPub, _ = k.signing.PublicKey()
	return k, nil
}

// newUser creates a user of account accPub signed by signer.
func newUser(name string, signer nkeys.KeyPair, accPub string) (seed, token string, err error) {
	u, seed, err := newKey(nkeys.CreateUser)
	if err != nil {
		return "", "", err
	}
	uPub, _ := u.PublicKey()
	uc := jwt.NewUserClaims(uPub)
	uc.Name = name
	signerPub, _ := signer.PublicKey()
	if signerPub != accPub {
		uc.IssuerAccount = accPub
	}
	token, err = uc.Encode(signer)
	if err != nil {
		return "", "", fmt.Errorf("embeddednats: encode user %s: %w", name, err)
	}
	return seed, token, nil
}

// check decodes every JWT so a corrupted trust file is refused at start.
func (t *Trust) check() error {
	if _, err := jwt.DecodeOperatorClaims(t.OperatorJWT); err != nil {
		return fmt.Errorf("operator_jwt: %w", err)
	}
	for name, tok := range map[string]string{"system_account_jwt": t.SystemAccountJWT, "admin_account_jwt": t.AdminAccountJWT} {
		if _, err := jwt.DecodeAccountClaims(tok); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	for name, tok := range map[string]string{"system_user_jwt": t.SystemUserJWT, "admin_user_jwt": t.AdminUserJWT} {
		if _, err := jwt.DecodeUserClaims(tok); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	for name, s := range map[string]string{"operator_seed": t.OperatorSeed, "operator_signing_seed": t.OperatorSigningSeed,
		"system_account_seed": t.SystemAccountSeed, "admin_account_seed": t.AdminAccountSeed,
		"admin_account_signing_seed": t.AdminAccountSigningSeed, "system_user_seed": t.SystemUserSeed, "admin_user_seed": t.AdminUserSeed} {
		if _, err := nkeys.FromSeed([]byte(s)); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// SystemAccount returns the system account's public key.
func (t *Trust) SystemAccount() string { return mustSubject(t.SystemAccountJWT) }

// AdminAccount returns the admin account's public key.
func (t *Trust) AdminAccount() string { return mustSubject(t.AdminAccountJWT) }

// OperatorSigningKey returns the key pair that signs account JWTs.
func (t *Trust) OperatorSigningKey() (nkeys.KeyPair, error) {
	return nkeys.FromSeed([]byte(t.OperatorSigningSeed))
}

func mustSubject(token string) string {
	c, err := jwt.DecodeGeneric(token)
	if err != nil {
		return ""
	}
	return c.Subject
}

// AdminCreds returns the admin user's .creds file contents.
func (t *Trust) AdminCreds() ([]byte, error) {
	return jwt.FormatUserConfig(t.AdminUserJWT, []byte(t.AdminUserSeed))
}

// SystemCreds returns the system user's .creds file contents.
func (t *Trust) SystemCreds() ([]byte, error) {
	return jwt.FormatUserConfig(t.SystemUserJWT, []byte(t.SystemUserSeed))
}

// WriteCreds writes the admin and system creds under dir (0600, dir 0700)
// as admin.creds and sys.creds, and returns the admin creds path.
func (t *Trust) WriteCreds(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("embeddednats: creds dir: %w", err)
	}
	admin, err := t.AdminCreds()
	if err != nil {
		return "", err
	}
	sys, err := t.SystemCreds()
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, "admin.creds")
	if err := WriteFileAtomic(p, admin, 0o600); err != nil {
		return "", err
	}
	if err := WriteFileAtomic(filepath.Join(dir, "sys.creds"), sys, 0o600); err != nil {
		return "", err
	}
	return p, nil
}

// serverConfig is the operator section of a nats-server configuration.
func (t *Trust) serverConfig(resolverDir string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "operator: %s\n", strconv.Quote(t.OperatorJWT))
	fmt.Fprintf(&b, "system_account: %s\n", strconv.Quote(t.SystemAccount()))
	fmt.Fprintf(&b, "resolver: { type: full, dir: %s, allow_delete: true, interval: \"2m\", timeout: \"5s\" }\n", strconv.Quote(resolverDir))
	fmt.Fprintf(&b, "resolver_preload: {\n  %s: %s\n  %s: %s\n}\n",
		t.SystemAccount(), strconv.Quote(t.SystemAccountJWT),
		t.AdminAccount(), strconv.Quote(t.AdminAccountJWT))
	return b.String()
}

// WriteFileAtomic writes data to path through a temporary file and a
// rename, with mode perm from the first byte written.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("embeddednats: write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return fmt.Errorf("embeddednats: write %s: %w", path, err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("embeddednats: write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("embeddednats: write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("embeddednats: write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("embeddednats: write %s: %w", path, err)
	}
	return nil
}
