package principal

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Platform operators are the named users of the platform admin account
// (principal name@platform), minted by platformd (platformctl operator
// add) with the admin account's signing key and recorded in OperatorBucket
// so they can be revoked. The bootstrap admin user of trust.json
// (BootstrapAdmin) is not in the registry and cannot be revoked.

// Control API subjects of the operator registry (under
// control.SubjectPrefix).
const (
	SubjOperatorAdd    = "operator.add"
	SubjOperatorList   = "operator.list"
	SubjOperatorRevoke = "operator.revoke"
)

// OperatorBucket is the replicated KV bucket (platform admin account)
// holding the registry: "op.<name>" the operator's record, and
// "revoked.<user public key>" one record per revoked key, kept forever (a
// name re-added later gets a new key; the old one stays revoked).
const OperatorBucket = "platform-operators"

// Registry key prefixes of OperatorBucket.
const (
	OperatorKeyPrefix = "op."
	RevokedKeyPrefix  = "revoked."
)

// BootstrapAdmin is the name of trust.json's admin user: every platformd
// connects with it, so it is reserved and never revoked.
const BootstrapAdmin = "admin"

// Audit actions of the operator registry (platform-audit stream).
const (
	ActionOperatorAdd    = "operator.add"
	ActionOperatorRevoke = "operator.revoke"
)

// Operator is a platform operator's registry record.
type Operator struct {
	Name      string    `json:"name"`
	PublicKey string    `json:"public_key"`
	Issuer    string    `json:"issuer,omitempty"`
	Created   time.Time `json:"created"`
	CreatedBy string    `json:"created_by,omitempty"`
	// Revoked is when the operator was revoked (nil: active), by RevokedBy.
	Revoked   *time.Time `json:"revoked,omitempty"`
	RevokedBy string     `json:"revoked_by,omitempty"`
	// Bootstrap marks trust.json's admin user (listed, never stored).
	Bootstrap bool `json:"bootstrap,omitempty"`
	// Expires is when the operator's user JWT expires (nil: never); from
	// then on the broker refuses its connections and the Verifier its
	// signed requests.
	Expires *time.Time `json:"expires,omitempty"`
}

// Expired reports whether the operator's credentials expired by now.
func (o Operator) Expired(now time.Time) bool { return o.Expires != nil && !now.Before(*o.Expires) }

// Principal is the name recorded for the operator's actions.
func (o Operator) Principal() string { return o.Name + "@" + Platform }

// OperatorAddRequest asks platformd to sign a user JWT for PublicKey (a
// user nkey the caller generated: its seed never leaves the caller).
type OperatorAddRequest struct {
	Name      string `json:"name"`
	PublicKey string `json:"public_key"`
	// ExpiresIn is how long the credentials are valid (0:
	// DefaultOperatorExpiry, so a caller that sends no expiry gets the
	// default, not credentials that never expire); NeverExpires asks for
	// none (ExpiresIn must then be 0).
	ExpiresIn    time.Duration `json:"expires_in,omitempty"`
	NeverExpires bool          `json:"never_expires,omitempty"`
}

// DefaultOperatorExpiry is how long a new operator's credentials are
// valid unless the request says otherwise.
const DefaultOperatorExpiry = 90 * 24 * time.Hour

// MinOperatorExpiry is the shortest validity accepted: a user JWT's
// expiry has a resolution of one second.
const MinOperatorExpiry = time.Second

// Expiry returns how long the requested credentials are valid, 0 for
// never, or an ErrMalformed error naming what is wrong.
func (r OperatorAddRequest) Expiry() (time.Duration, error) {
	switch {
	case r.NeverExpires && r.ExpiresIn != 0:
		return 0, fmt.Errorf("%w: never_expires and expires_in %s are both set: ask for one", ErrMalformed, r.ExpiresIn)
	case r.NeverExpires:
		return 0, nil
	case r.ExpiresIn == 0:
		return DefaultOperatorExpiry, nil
	case r.ExpiresIn < MinOperatorExpiry:
		return 0, fmt.Errorf("%w: expires_in %s: want at least %s", ErrMalformed, r.ExpiresIn, MinOperatorExpiry)
	}
	return r.ExpiresIn, nil
}

// ParseExpiry parses an operator credential validity as platformctl takes
// it: a number of days ("90d"), a Go duration ("720h", "2h30m", "2s"), or
// "0" for never (returned as 0). Negative, fractional-day and sub-second
// values are refused with a message saying what is accepted.
func ParseExpiry(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	const want = "want a number of days (90d), a duration (720h, 2h30m, 2s; at least 1s) or 0 for never"
	if s == "0" {
		return 0, nil
	}
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.ParseInt(days, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%w: %q: %s", ErrMalformed, s, want)
		}
		if n > math.MaxInt64/int64(24*time.Hour) {
			return 0, fmt.Errorf("%w: %q is too long: at most %d days", ErrMalformed, s, math.MaxInt64/int64(24*time.Hour))
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("%w: %q: %s", ErrMalformed, s, want)
		}
	}
	if d == 0 {
		return 0, nil
	}
	if d < MinOperatorExpiry {
		return 0, fmt.Errorf("%w: %q: %s", ErrMalformed, s, want)
	}
	return d, nil
}

// OperatorAddResponse is the new operator and its user JWT.
type OperatorAddResponse struct {
	Operator Operator `json:"operator"`
	JWT      string   `json:"jwt"`
}

// OperatorRevokeRequest names the operator to revoke.
type OperatorRevokeRequest struct {
	Name string `json:"name"`
}

var operatorNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// ValidateOperatorName checks a new operator's name: 1-63 lower-case
// letters, digits and '-', starting with a letter or digit, and not the
// reserved BootstrapAdmin.
func ValidateOperatorName(name string) error {
	if !operatorNameRE.MatchString(name) {
		return fmt.Errorf("%w: operator name %q: want 1-63 lower-case letters, digits and '-', starting with a letter or digit", ErrMalformed, name)
	}
	if name == BootstrapAdmin {
		return fmt.Errorf("%w: operator name %q is reserved for the bootstrap admin user of trust.json", ErrMalformed, name)
	}
	return nil
}
