package principal

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// Errors. Every refusal wraps one of them with a message saying what was
// wrong.
var (
	// ErrUnauthenticated: the signature, the user or its account does
	// not check out (forged, expired, replayed, revoked, unknown).
	ErrUnauthenticated = errors.New("principal: not authenticated")
	// ErrMalformed: the envelope or the creds cannot be read.
	ErrMalformed = errors.New("principal: malformed")
)

// Platform is the scope name of the platform admin account's users.
const Platform = "platform"

// Unauthenticated prefixes the name an unsigned request gives, as
// recorded in the audit log.
const Unauthenticated = "unauthenticated:"

// Principal is an authenticated user.
type Principal struct {
	// User is the name in the user JWT (its public key when unnamed);
	// UserKey its public key.
	User    string `json:"user"`
	UserKey string `json:"user_key"`
	// Account is the user's account; Tenant the tenant owning it (""
	// for the platform admin account: Operator).
	Account  string `json:"account"`
	Tenant   string `json:"tenant,omitempty"`
	Operator bool   `json:"operator,omitempty"`
	// Issuer is the key that signed the user JWT; IssuedAt and Expires
	// (0: never) are its times, Unix seconds.
	Issuer   string `json:"issuer"`
	IssuedAt int64  `json:"iat"`
	Expires  int64  `json:"exp,omitempty"`
}

// Name is the identity recorded on every action: user@tenant, or
// user@platform for a platform operator.
func (p Principal) Name() string {
	if p.Operator {
		return p.User + "@" + Platform
	}
	return p.User + "@" + p.Tenant
}

// Scope is the tenant whose objects p may act on ("" for an operator,
// who may act on every scope).
func (p Principal) Scope() string { return p.Tenant }

// MayAct reports whether p may act in scope (a tenant, "" the admin
// account): an operator anywhere, a tenant's user in its tenant only.
func (p Principal) MayAct(scope string) error {
	if p.Operator || scope == p.Tenant {
		return nil
	}
	where := "the platform admin account"
	if scope != "" {
		where = "tenant " + scope
	}
	return fmt.Errorf("%w: forbidden: %s is a user of tenant %s and cannot act on %s", ErrUnauthenticated, p.Name(), p.Tenant, where)
}

// Proof is the signature part of a signed request.
type Proof struct {
	JWT   string `json:"jwt"`
	Time  int64  `json:"ts"` // Unix nanoseconds
	Nonce string `json:"nonce"`
	Sig   string `json:"sig"` // base64url (raw) nkey signature of Message
}

// Envelope is a signed request: Body is the request's JSON.
type Envelope struct {
	Auth *Proof `json:"auth"`
	Body []byte `json:"body"`
}

// Message is what a signature covers: the full control subject, the
// timestamp, the nonce and the body's SHA-256.
func Message(subject string, ts int64, nonce string, body []byte) []byte {
	h := sha256.Sum256(body)
	return []byte("platform-signed-request-v1\n" + subject + "\n" + strconv.FormatInt(ts, 10) + "\n" + nonce + "\n" + hex.EncodeToString(h[:]))
}

// Open returns the envelope of body when body is one (a JSON object with
// exactly the keys auth and body), else false: an unsigned request.
func Open(body []byte) (Envelope, bool) {
	if !bytes.Contains(body, []byte(`"auth"`)) {
		return Envelope{}, false
	}
	var e Envelope
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil || e.Auth == nil {
		return Envelope{}, false
	}
	return e, true
}

// Signer signs requests as one user.
type Signer struct {
	jwt  string
	kp   nkeys.KeyPair
	user string
}

// LoadSigner reads a .creds file.
func LoadSigner(path string) (*Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("principal: user creds: %w", err)
	}
	s, err := NewSigner(b)
	if err != nil {
		return nil, fmt.Errorf("%w (file %s)", err, path)
	}
	return s, nil
}

// NewSigner reads the text of a .creds file: the user JWT and its seed,
// which must belong to it.
func NewSigner(creds []byte) (*Signer, error) {
	if !bytes.Contains(creds, []byte("-----BEGIN")) {
		return nil, fmt.Errorf("%w: not a NATS .creds file: expected a -----BEGIN NATS USER JWT----- block and a -----BEGIN USER NKEY SEED----- block", ErrMalformed)
	}
	token, err := jwt.ParseDecoratedJWT(creds)
	if err != nil {
		return nil, fmt.Errorf("%w: the .creds file's user JWT: %v", ErrMalformed, err)
	}
	uc, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return nil, fmt.Errorf("%w: the .creds file's user JWT: %v", ErrMalformed, err)
	}
	kp, err := jwt.ParseDecoratedUserNKey(creds)
	if err != nil {
		return nil, fmt.Errorf("%w: the .creds file's user seed is missing or malformed: %v", ErrMalformed, err)
	}
	if pub, _ := kp.PublicKey(); pub != uc.Subject {
		return nil, fmt.Errorf("%w: the .creds file's seed does not belong to its user JWT", ErrMalformed)
	}
	name := uc.Name
	if name == "" {
		name = uc.Subject
	}
	return &Signer{jwt: token, kp: kp, user: name}, nil
}

// User is the signer's user name.
func (s *Signer) User() string { return s.user }

// Sign wraps body (the request's JSON) for subject (the full control
// subject, e.g. platform.v1.redrive.approve) at now.
func (s *Signer) Sign(subject string, body []byte, now time.Time) (Envelope, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return Envelope{}, fmt.Errorf("principal: nonce: %w", err)
	}
	p := &Proof{JWT: s.jwt, Time: now.UnixNano(), Nonce: base64.RawURLEncoding.EncodeToString(b)}
	sig, err := s.kp.Sign(Message(subject, p.Time, p.Nonce, body))
	if err != nil {
		return Envelope{}, fmt.Errorf("principal: sign: %w", err)
	}
	p.Sig = base64.RawURLEncoding.EncodeToString(sig)
	return Envelope{Auth: p, Body: body}, nil
}
