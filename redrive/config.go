package redrive

import (
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/validate"
)

// Bucket is the replicated KV bucket holding requests, their frozen
// selections and the per-DLQ run locks of the platform admin account.
const Bucket = "platform-redrive"

// TenantBucket is the bucket (in the PLATFORM account) holding the
// requests of tenant's DLQs: one per tenant, so request ids, run locks
// and adoption never mix tenants.
func TenantBucket(tenant string) string {
	if tenant == "" {
		return Bucket
	}
	return Bucket + "-tenant-" + tenant
}

func validToken(s string) bool {
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return s != ""
}

// Config configures a Service.
type Config struct {
	// Replicas of the bucket (and of the audit stream if redrive creates
	// it). Default 1; platformd passes its durability replicas.
	Replicas int
	// Instance names this service instance as a runner (default
	// <hostname>-<random>): records say who runs a redrive.
	Instance string
	// Checkpoint is how often a run writes its progress (default 250ms);
	// a pause or cancel takes effect within about one checkpoint.
	Checkpoint time.Duration
	// LeaseTTL: a running redrive whose runner did not renew the run's
	// lease (internal/kvlease; renewed every Checkpoint) for this long has
	// lost its runner (crash, node loss) and is adopted by another
	// instance (default 10s; must exceed Checkpoint several times).
	LeaseTTL time.Duration
	// AdoptInterval is how often instances look for such runs (default 2s).
	AdoptInterval time.Duration
	// AuditBatch is how many links one redrive.sent audit record holds
	// (default 500).
	AuditBatch int
	// Window bounds a run's publishes awaiting their ack (default 2048;
	// at most 16384). The JetStream context's PublishAsyncMaxPending
	// (nats.go default 4000) bounds them too. bench redrive sets it to
	// its --window, the raw publish's, to compare like with like.
	Window int
	// Auditor receives the audit records (default: StreamAuditor over
	// Control).
	Auditor Auditor
	Logger  *slog.Logger

	// Tenant scopes the service to one tenant's account: the js given to
	// New is a connection in that account (its DLQs are read and its
	// events redriven there), while the requests live in the bucket
	// TenantBucket(Tenant) and the audit records in the platform-audit
	// stream, both reached through Control (the PLATFORM account), so the
	// tenant's own users can neither read nor alter them. Audit records
	// carry the tenant and History shows only the tenant's. "" is the
	// platform admin account (bucket Bucket, every audit record).
	Tenant string
	// Control is the PLATFORM account's JetStream holding the bucket and
	// the audit stream (default: the js given to New).
	Control jetstream.JetStream
	// OwnConn, if set, is told when the service opens its own connection
	// for its runs (one, shared, with the credentials of js's, open while
	// a run is; wirepath.go) and, through the func it returns, when it
	// closes it. platformd counts it among the platform's connections of
	// a tenant's account.
	OwnConn func() (closed func())
	// NamePrefix is the prefix of stored object names in the account
	// (tenancy stores topic NAME as "stored.NAME"): DLQs are shown and
	// named without it, and a request's destination gets it.
	NamePrefix string

	// afterSend, for tests, runs after each send; an error stops the run
	// at once without writing anything (a crash).
	afterSend func(next int) error
	// beforeRead, for tests, runs before the prefetcher first reads the
	// DLQ (a slow start: the meta leader busy, a loaded cluster).
	beforeRead func()
	// noWire, for tests, keeps a run on the service's nats.go connection
	// (what a run does when wire cannot connect as it; wirepath.go).
	noWire bool
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{Replicas: 1, Checkpoint: 250 * time.Millisecond, LeaseTTL: 10 * time.Second, AdoptInterval: 2 * time.Second, AuditBatch: 500, Window: 2048}
}

// EnsureDefaults fills zero fields with the defaults.
func (c *Config) EnsureDefaults() {
	d := DefaultConfig()
	orDefault(&c.Replicas, d.Replicas)
	orDefault(&c.Checkpoint, d.Checkpoint)
	orDefault(&c.LeaseTTL, d.LeaseTTL)
	orDefault(&c.AdoptInterval, d.AdoptInterval)
	orDefault(&c.AuditBatch, d.AuditBatch)
	orDefault(&c.Window, d.Window)
	if c.Instance == "" {
		host, _ := os.Hostname()
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		c.Instance = host + "-" + hex.EncodeToString(b)
	}
}

// orDefault sets *v to d when *v is its type's zero value.
func orDefault[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

// Validate reports every problem.
func (c Config) Validate() error {
	var p validate.Problems
	if c.Replicas < 1 || c.Replicas > 5 {
		p.Addf("replicas", "must be 1..5, got %d", c.Replicas)
	}
	if c.Checkpoint < 10*time.Millisecond {
		p.Addf("checkpoint", "must be at least 10ms, got %s", c.Checkpoint)
	}
	if c.LeaseTTL < 4*c.Checkpoint {
		p.Addf("lease_ttl", "must be at least 4 checkpoints (%s), got %s", 4*c.Checkpoint, c.LeaseTTL)
	}
	if c.AdoptInterval <= 0 {
		p.Addf("adopt_interval", "must be > 0, got %s", c.AdoptInterval)
	}
	if c.AuditBatch < 1 || c.AuditBatch > 2000 {
		p.Addf("audit_batch", "must be 1..2000, got %d", c.AuditBatch)
	}
	if c.Window < 1 || c.Window > 16384 {
		p.Addf("window", "must be 1..16384, got %d", c.Window)
	}
	if c.Tenant != "" && !validToken(c.Tenant) {
		p.Addf("tenant", "must be letters, digits, - and _ only (it names a bucket), got %q", c.Tenant)
	}
	if c.NamePrefix != "" && !strings.HasSuffix(c.NamePrefix, ".") {
		p.Addf("name_prefix", "must end with a dot, got %q", c.NamePrefix)
	}
	return p.Err(ErrInvalid)
}
