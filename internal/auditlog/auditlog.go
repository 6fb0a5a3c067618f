package auditlog

import (
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Stream is the replicated stream (PLATFORM account) every audit record
// is appended to, under Subject.<tenant>.<action>.
const (
	Stream  = "platform-audit"
	Subject = "platform.audit"
)

// Record is one audit entry.
type Record struct {
	Seq    uint64    `json:"seq,omitempty"`
	Time   time.Time `json:"time"`
	Actor  string    `json:"actor"`
	Action string    `json:"action"`
	Tenant string    `json:"tenant,omitempty"`
	Target string    `json:"target,omitempty"`
	Before any       `json:"before,omitempty"`
	After  any       `json:"after,omitempty"`
	Detail string    `json:"detail,omitempty"`
}

// StreamConfig is the audit stream's configuration with replicas.
func StreamConfig(replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        Stream,
		Description: "platform audit log: admin changes, quota hits, authorization denials",
		Subjects:    []string{Subject + ".>"},
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
		MaxAge:      400 * 24 * time.Hour,
		Discard:     jetstream.DiscardOld,
	}
}

// Encode returns the subject r is appended under and its body, r.Time
// set to now (UTC) when zero.
func Encode(r Record) (subject string, body []byte, err error) {
	if r.Time.IsZero() {
		r.Time = time.Now().UTC()
	}
	tenant := r.Tenant
	if tenant == "" {
		tenant = "_"
	}
	b, err := json.Marshal(r)
	if err != nil {
		return "", nil, err
	}
	return Subject + "." + tenant + "." + r.Action, b, nil
}
