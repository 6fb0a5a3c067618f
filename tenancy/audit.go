package tenancy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/auditlog"
	"github.com/msgplatform/platform/internal/jserr"
	"github.com/msgplatform/platform/internal/retry"
)

// AuditStream is the replicated stream (PLATFORM account) every audit
// record is appended to, under AuditSubject.<tenant>.<action>.
const (
	AuditStream  = auditlog.Stream
	AuditSubject = auditlog.Subject
)

// Audit actions besides the admin operations (tenant.create, user.add...).
const (
	ActionQuotaHit   = "quota.hit"
	ActionAuthDenied = "auth.denied"
	// ActionGateRefused: a JetStream request whose reply was not an inbox
	// (see gate.go).
	ActionGateRefused = "gate.refused"
)

// Record is one audit entry.
type Record = auditlog.Record

// AuditFilter selects records.
type AuditFilter struct {
	Tenant string `json:"tenant,omitempty"`
	// Limit keeps the last Limit records (default 100).
	Limit int `json:"limit,omitempty"`
}

func openAudit(ctx context.Context, js jetstream.JetStream, replicas int) error {
	_, err := js.CreateOrUpdateStream(ctx, auditlog.StreamConfig(replicas))
	if err != nil {
		return fmt.Errorf("tenancy: audit stream: %w", err)
	}
	return nil
}

// appendAudit writes r and waits for the stream's ack.
func (m *Manager) appendAudit(ctx context.Context, r Record) error {
	subject, b, err := auditlog.Encode(r)
	if err != nil {
		return err
	}
	m.auditMu.Lock()
	if !m.auditReady { // created with the first record
		if err := openAudit(ctx, m.js, m.cfg.Replicas); err != nil {
			m.auditMu.Unlock()
			m.log.Error("tenancy: audit stream", "err", err)
			return err
		}
		m.auditReady = true
	}
	m.auditMu.Unlock()
	if _, err := m.js.Publish(ctx, subject, b); err != nil {
		m.log.Error("tenancy: audit append failed", "action", r.Action, "tenant", r.Tenant, "err", err)
		return fmt.Errorf("tenancy: audit: %w", err)
	}
	return nil
}

// auditAsync appends r without making the caller wait (quota hits and
// denials happen on hot paths).
func (m *Manager) auditAsync(r Record) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = m.appendAudit(ctx, r)
	}()
}

// Audit returns the last f.Limit records, oldest first, of one tenant or
// of all.
func (m *Manager) Audit(ctx context.Context, f AuditFilter) ([]Record, error) {
	if f.Tenant != "" {
		if err := ValidateName("tenant", f.Tenant); err != nil {
			return nil, err
		}
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	filter := AuditSubject + ".>"
	if f.Tenant != "" {
		filter = AuditSubject + "." + f.Tenant + ".>"
	}
	// A JetStream API call can meet no responders while the cluster
	// moves a leader: retried (bounded by ctx), not reported.
	var c jetstream.Consumer
	err := retry.Do(ctx, retry.Policy{Initial: 100 * time.Millisecond, Max: time.Second, Retryable: func(err error) bool {
		return jserr.NoResponders(err) || errors.Is(err, context.DeadlineExceeded)
	}}, func(ctx context.Context) error {
		var err error
		c, err = m.js.OrderedConsumer(ctx, AuditStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
		return err
	})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tenancy: read audit: %w", err)
	}
	var out []Record
	// A consumer just created answers its first pulls once its server
	// has registered it (over the routes, for a replica elsewhere): "no
	// responders" before that is retried, bounded by ctx and noAnswer.
	for noAnswer := 0; ; {
		n, pending, err := fetchAudit(c, &out, f.Limit)
		if n == 0 && jserr.NoResponders(err) && noAnswer < 50 && ctx.Err() == nil {
			noAnswer++
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("tenancy: read audit: %w", err)
		}
		if n == 0 || pending == 0 {
			return out, nil
		}
	}
}

// fetchAudit appends one batch of c's records to out, keeping the last
// limit, and returns how many it read and how many are still pending.
func fetchAudit(c jetstream.Consumer, out *[]Record, limit int) (n int, pending uint64, err error) {
	batch, err := c.FetchNoWait(500)
	if err != nil {
		return 0, 0, err
	}
	for msg := range batch.Messages() {
		n++
		var r Record
		if json.Unmarshal(msg.Data(), &r) != nil {
			continue
		}
		if md, _ := msg.Metadata(); md != nil {
			r.Seq, pending = md.Sequence.Stream, md.NumPending
		}
		*out = append(*out, r)
		if len(*out) > limit {
			*out = (*out)[1:]
		}
	}
	if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
		return n, pending, err
	}
	return n, pending, nil
}

// denialsQueue is the queue group of the managers' auth error
// subscriptions: each event is counted and audited by one manager, not
// once per daemon.
const denialsQueue = "platform-tenancy-denials"

// watchDenials records every refused connection of a tenant user (bad
// or revoked credentials, suspended tenant, connection quota) from the
// servers' auth error events. The platform's own users are left out
// (see ownConn).
func (m *Manager) watchDenials() (*nats.Subscription, error) {
	return m.sys.QueueSubscribe("$SYS.SERVER.*.CLIENT.AUTH.ERR", denialsQueue, func(msg *nats.Msg) {
		var ev server.DisconnectEventMsg
		if json.Unmarshal(msg.Data, &ev) != nil || ev.Client.Jwt == "" {
			return
		}
		uc, err := jwt.DecodeUserClaims(ev.Client.Jwt)
		if err != nil {
			return
		}
		acc := uc.IssuerAccount
		if acc == "" {
			acc = uc.Issuer
		}
		tenant, own := m.ownConn(acc, uc.Issuer)
		if tenant == "" {
			return
		}
		if !own {
			// The platform's own user (signed by the account's signing
			// key): refused for a moment while a resume or an update
			// reaches every node, and it tries again. Not the tenant's
			// denial: logged, not audited or counted.
			m.log.Info("tenancy: a platform connection to a tenant account was refused", "tenant", tenant, "user", uc.Name, "reason", ev.Reason)
			return
		}
		m.stats(tenant).Denied.Add(1)
		m.auditAsync(Record{Actor: "nats-server", Action: ActionAuthDenied, Tenant: tenant, Target: uc.Name,
			Detail: fmt.Sprintf("connection of user %s (%s) from %s refused: %s", uc.Name, uc.Subject, ev.Client.Host, ev.Reason)})
	})
}
