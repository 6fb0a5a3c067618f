package tenancy

import (
	"fmt"
	"regexp"
	"time"

	"github.com/msgplatform/platform/internal/validate"
)

// nameRE is the form of tenant and user names: one subject token of
// lower-case letters, digits and '-', e.g. "harbor-retail".
var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// ValidateName reports whether s is a valid tenant or user name.
func ValidateName(what, s string) error {
	if !nameRE.MatchString(s) {
		return fmt.Errorf("%w: %s name %q: want 1-63 lower-case letters, digits and '-', starting with a letter or digit", ErrInvalid, what, s)
	}
	return nil
}

// Policy is what happens to a publish over the tenant's rate quota.
type Policy string

// Policies.
const (
	// PolicyThrottle delays the publish (and so its ack) until the quota
	// allows it; a bounded queue (half a second of quota) absorbs bursts
	// and a publish that finds it full is rejected.
	PolicyThrottle Policy = "throttle"
	// PolicyReject refuses the publish at once with a JetStream-shaped
	// error, code 429.
	PolicyReject Policy = "reject"
)

// Tier is a JetStream storage quota for one replica tier, in bytes
// (-1: unlimited, 0: none).
type Tier struct {
	Memory int64 `mapstructure:"memory" json:"memory"`
	Disk   int64 `mapstructure:"disk" json:"disk"`
}

// Storage holds the storage quota per replica tier: R1 streams count
// against R1, R3 streams against R3 (bytes of every replica).
type Storage struct {
	R1 Tier `mapstructure:"r1" json:"r1"`
	R3 Tier `mapstructure:"r3" json:"r3"`
}

// Quota is what a tenant may use. Counts and sizes take -1 for
// unlimited; rates take 0 for unlimited. Everything except the publish
// rate is enforced by nats-server from the account JWT; the publish rate
// by the platform's ingest (see the package documentation).
type Quota struct {
	Connections   int     `mapstructure:"connections" json:"connections"`
	Streams       int     `mapstructure:"streams" json:"streams"`
	Consumers     int     `mapstructure:"consumers" json:"consumers"`
	MaxAckPending int     `mapstructure:"max_ack_pending" json:"max_ack_pending"`
	MaxPayload    int64   `mapstructure:"max_payload" json:"max_payload"`
	Storage       Storage `mapstructure:"storage" json:"storage"`
	// PublishRate is events/s over the whole cluster (0: unlimited).
	PublishRate int `mapstructure:"publish_rate" json:"publish_rate"`
	// PublishBytesRate is bytes/s over the whole cluster, headers and
	// payload as the client sent them (0: unlimited).
	PublishBytesRate int64  `mapstructure:"publish_bytes_rate" json:"publish_bytes_rate"`
	Policy           Policy `mapstructure:"policy" json:"policy"`
}

// DefaultQuota is a modest tenant: 100 connections, 100 streams, 1000
// consumers, 1 MiB payloads, 1 GiB memory and 10 GiB disk per tier, no
// publish-rate limit, policy throttle.
func DefaultQuota() Quota {
	return Quota{
		Connections:   100,
		Streams:       100,
		Consumers:     1000,
		MaxAckPending: 10000,
		MaxPayload:    1 << 20,
		Storage: Storage{
			R1: Tier{Memory: 1 << 30, Disk: 10 << 30},
			R3: Tier{Memory: 1 << 30, Disk: 10 << 30},
		},
		Policy: PolicyThrottle,
	}
}

// Validate reports every problem, keyed like the configuration
// ("quota.publish_rate").
func (q Quota) Validate() error {
	var p validate.Problems
	q.validateInto(&p)
	return p.Err(ErrInvalid)
}

func (q Quota) validateInto(p *validate.Problems) {
	count := func(key string, v int64) {
		if v < -1 {
			p.Addf(key, "must be -1 (unlimited) or >= 0, got %d", v)
		}
	}
	count("connections", int64(q.Connections))
	count("streams", int64(q.Streams))
	count("consumers", int64(q.Consumers))
	count("max_ack_pending", int64(q.MaxAckPending))
	count("storage.r1.memory", q.Storage.R1.Memory)
	count("storage.r1.disk", q.Storage.R1.Disk)
	count("storage.r3.memory", q.Storage.R3.Memory)
	count("storage.r3.disk", q.Storage.R3.Disk)
	if q.MaxPayload == 0 || q.MaxPayload < -1 || q.MaxPayload > 8<<20 {
		p.Addf("max_payload", "must be 1 byte to 8MiB (the server's limit) or -1, got %d", q.MaxPayload)
	}
	if q.PublishRate < 0 {
		p.Addf("publish_rate", "must be >= 0 events/s (0: unlimited), got %d", q.PublishRate)
	}
	if q.PublishBytesRate < 0 {
		p.Addf("publish_bytes_rate", "must be >= 0 bytes/s (0: unlimited), got %d", q.PublishBytesRate)
	} else if q.PublishBytesRate > 0 && q.MaxPayload > 0 && q.PublishBytesRate < q.MaxPayload {
		p.Addf("publish_bytes_rate", "must be at least max_payload (%d) so one event can pass, got %d", q.MaxPayload, q.PublishBytesRate)
	}
	switch q.Policy {
	case PolicyThrottle, PolicyReject:
	default:
		p.Addf("policy", "must be %s or %s, got %q", PolicyThrottle, PolicyReject, q.Policy)
	}
}

// Spec declares a tenant.
type Spec struct {
	Name  string `mapstructure:"name" json:"name"`
	Quota Quota  `mapstructure:"quota" json:"quota"`
}

// DefaultSpec returns a spec with name and the default quota.
func DefaultSpec(name string) Spec { return Spec{Name: name, Quota: DefaultQuota()} }

// Validate reports every problem, keyed like the configuration.
func (s Spec) Validate() error {
	var p validate.Problems
	s.validateInto(&p)
	return p.Err(ErrInvalid)
}

func (s Spec) validateInto(p *validate.Problems) {
	if !nameRE.MatchString(s.Name) {
		p.Addf("name", "want 1-63 lower-case letters, digits and '-', starting with a letter or digit, got %q", s.Name)
	}
	var qp validate.Problems
	s.Quota.validateInto(&qp)
	p.Merge("quota", qp.Err(nil))
}

// State is a tenant's lifecycle state.
type State string

// States.
const (
	StateActive    State = "active"
	StateSuspended State = "suspended"
)

// Tenant is the registry record of a tenant.
type Tenant struct {
	Spec
	State State `json:"state"`
	// Account is the NATS account's public key; SigningKey the public
	// key of the account signing key that signs its users.
	Account    string `json:"account"`
	SigningKey string `json:"signing_key"`
	// SealedSigningSeed is the signing key's seed, encrypted with a key
	// derived from the installation's trust (never stored in clear).
	SealedSigningSeed []byte `json:"sealed_signing_seed,omitempty"`
	// Objects are the tenant's topics, queues and groups.
	Topics map[string]int    `json:"topics,omitempty"` // name -> partitions
	Queues map[string]bool   `json:"queues,omitempty"`
	Groups map[string]string `json:"groups,omitempty"` // group -> topic
	Users  map[string]User   `json:"users,omitempty"`
	// Exports are the tenant's topics shared with other tenants (topic ->
	// reader tenants); Imports the topics other tenants share with it.
	Exports map[string][]string `json:"exports,omitempty"`
	Imports []Share             `json:"imports,omitempty"`
	// Revoked maps a user public key to the time it was revoked (kept
	// in the account JWT after the user is gone).
	Revoked   map[string]int64 `json:"revoked,omitempty"`
	Suspended *time.Time       `json:"suspended_at,omitempty"`
	Created   time.Time        `json:"created"`
	Updated   time.Time        `json:"updated"`

	revision uint64
	// settling names a user whose scope is marked in the account JWT
	// (see Manager.settleScope); never stored.
	settling string
}

// User is one credential of a tenant.
type User struct {
	Name      string     `json:"name"`
	PublicKey string     `json:"public_key"`
	Pub       []string   `json:"pub,omitempty"`
	Sub       []string   `json:"sub,omitempty"`
	Created   time.Time  `json:"created"`
	Revoked   *time.Time `json:"revoked,omitempty"`
	// ScopeKey is the user's own scoped signing key (public part; the
	// seed is discarded once the user JWT is signed): the user's
	// permissions are the scope's template in the account JWT, so
	// UpdateUser changes them by pushing the account. Empty for users
	// issued before live permission changes (permissions in their JWT).
	ScopeKey string `json:"scope_key,omitempty"`
	// Roles are the user's tenant roles (RoleViewer, RoleApprover,
	// RoleOperator; SetUserRoles), sorted.
	Roles []string `json:"roles,omitempty"`
}

// UserSpec asks for a user with permissions on the named topics, queues
// and groups of its tenant.
type UserSpec struct {
	Name string   `json:"name"`
	Pub  []string `json:"pub,omitempty"`
	Sub  []string `json:"sub,omitempty"`
}

// Public returns t without secrets, for listing.
func (t Tenant) Public() Tenant {
	t.SealedSigningSeed = nil
	return t
}

// platformIssued says whether a user signed by issuer is one of the
// platform's own in t's account: those are signed by the account's
// signing key (or its identity key), tenant users by scoped keys of their
// own.
func (t *Tenant) platformIssued(issuer string) bool {
	return issuer == t.SigningKey || issuer == t.Account
}
