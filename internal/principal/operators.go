package principal

import (
	"fmt"
	"regexp"
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
}

// Principal is the name recorded for the operator's actions.
func (o Operator) Principal() string { return o.Name + "@" + Platform }

// OperatorAddRequest asks platformd to sign a user JWT for PublicKey (a
// user nkey the caller generated: its seed never leaves the caller).
type OperatorAddRequest struct {
	Name      string `json:"name"`
	PublicKey string `json:"public_key"`
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
