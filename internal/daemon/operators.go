package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/msgplatform/platform/conf"
	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/gather"
	"github.com/msgplatform/platform/internal/jserr"
	"github.com/msgplatform/platform/internal/principal"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/redrive"
)

// Platform operators: named users of the platform admin account, so two
// people can approve each other's review-required redrives and group
// resets on the platform scope (internal/principal).
//
//   - operator add: platformd signs a user JWT for a public key the caller
//     generated (the seed never leaves its machine) with the admin
//     account's signing key, valid for the requested expiry
//     (DefaultOperatorExpiry unless asked otherwise), and records it in
//     principal.OperatorBucket by compare-and-set create, so two adds of
//     one name cannot both succeed.
//   - operator revoke: records "revoked.<key>" (the Verifier refuses it on
//     every platformd from then on), pushes the admin account JWT with the
//     key revoked to every node (the broker closes and refuses its
//     connections), then marks the record revoked.
//   - add and revoke must be signed by a platform principal (the bootstrap
//     admin or an operator; tenant users are refused) and are audited.
//
// Limit: a node that lost its resolver directory accepts a revoked key at
// the broker until its resolver next syncs (the Verifier still refuses
// it); platformd re-pushes the revocations at start
// (reconcileOperatorRevocations). Details: docs/design/operators.md.

// operatorBucket opens (create: or creates) the operator registry.
//
// Its reads are served by the stream leader, not by any replica through
// direct get (the bucket is created, or updated, with AllowDirect off):
// a revocation must be seen by the next check, and a replica that has not
// caught up would answer "not revoked". Direct gets may also have no
// responders right after the bucket is created ("nats: no responders
// available for request" on the first read).
func (d *Daemon) operatorBucket(ctx context.Context, create bool) (jetstream.KeyValue, error) {
	if kv := d.opKV.Load(); kv != nil {
		return *kv, nil
	}
	kv, err := d.js.KeyValue(ctx, principal.OperatorBucket)
	if err != nil && create && errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = d.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: principal.OperatorBucket, Description: "platform operators (users of the platform admin account) and their revoked keys",
			History: 5, Replicas: d.cfg.Durability().Replicas, Storage: jetstream.FileStorage,
		})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = d.js.KeyValue(ctx, principal.OperatorBucket)
		}
	}
	if err != nil {
		return kv, err
	}
	if kv, err = platform.LeaderReads(ctx, d.js, kv); err != nil {
		return nil, fmt.Errorf("operator registry: %w", err)
	}
	d.opKV.Store(&kv)
	return kv, nil
}

// operatorRevoked is the Verifier's registry check
// (principal.Config.RevokedOperator).
func (d *Daemon) operatorRevoked(ctx context.Context, userKey string) (principal.Operator, bool, error) {
	kv, err := d.operatorBucket(ctx, false)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return principal.Operator{}, false, nil // no operator was ever added
	}
	if err != nil {
		return principal.Operator{}, false, err
	}
	e, err := kv.Get(ctx, principal.RevokedKeyPrefix+userKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return principal.Operator{}, false, nil
	}
	if err != nil {
		return principal.Operator{}, false, err
	}
	var op principal.Operator
	if err := json.Unmarshal(e.Value(), &op); err != nil {
		return principal.Operator{}, false, fmt.Errorf("registry record %s: %w", e.Key(), err)
	}
	return op, true, nil
}

// operatorEndpoints are the operator registry's control API endpoints.
func (d *Daemon) operatorEndpoints(v *principal.Verifier) []control.Endpoint {
	go d.reconcileOperatorRevocations()
	return []control.Endpoint{
		signedRep(v, "operator_add", principal.SubjOperatorAdd, d.addOperator),
		signedRep(v, "operator_revoke", principal.SubjOperatorRevoke, d.revokeOperator),
		{Name: "operator_list", Subject: principal.SubjOperatorList, Handle: control.JSON(func(ctx context.Context, _ struct{}) ([]principal.Operator, error) {
			return d.listOperators(ctx)
		})},
	}
}

// needOperator refuses a caller that is not a platform principal.
func needOperator(c caller, what string) error {
	if c.p == nil {
		return refused{fmt.Errorf("%w: %s needs an authenticated platform principal: pass --user-creds FILE (the bootstrap admin.creds or a platform operator's .creds) so platformctl signs the request; nothing was done", principal.ErrUnauthenticated, what)}
	}
	if !c.p.Operator {
		return refused{fmt.Errorf("%w: forbidden: %s is a user of tenant %s; only a platform principal (the bootstrap admin or a platform operator) may %s; nothing was done", principal.ErrUnauthenticated, c.p.Name(), c.p.Tenant, what)}
	}
	return nil
}

func invalid(err error) error { return fmt.Errorf("%w: %w", control.ErrInvalid, err) }

// addOperator signs a user JWT of the admin account for r.PublicKey,
// named r.Name, and records it.
func (d *Daemon) addOperator(ctx context.Context, c caller, r principal.OperatorAddRequest) (principal.OperatorAddResponse, error) {
	if err := principal.ValidateOperatorName(r.Name); err != nil {
		return principal.OperatorAddResponse{}, invalid(err)
	}
	if !nkeys.IsValidPublicUserKey(r.PublicKey) {
		return principal.OperatorAddResponse{}, invalid(fmt.Errorf("public_key %q is not a user nkey (U...)", r.PublicKey))
	}
	validity, err := r.Expiry()
	if err != nil {
		return principal.OperatorAddResponse{}, invalid(err)
	}
	if err := needOperator(c, "add a platform operator"); err != nil {
		return principal.OperatorAddResponse{}, err
	}
	if uc, err := jwt.DecodeUserClaims(d.trust.AdminUserJWT); err == nil && uc.Subject == r.PublicKey {
		return principal.OperatorAddResponse{}, invalid(errors.New("public_key is the bootstrap admin's key"))
	}
	kv, err := d.operatorBucket(ctx, true)
	if err != nil {
		return principal.OperatorAddResponse{}, fmt.Errorf("operator registry %s: %w", principal.OperatorBucket, err)
	}
	if _, err := kv.Get(ctx, principal.RevokedKeyPrefix+r.PublicKey); err == nil {
		return principal.OperatorAddResponse{}, refused{fmt.Errorf("%w: public key %s was revoked; generate a new key", control.ErrConflict, r.PublicKey)}
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return principal.OperatorAddResponse{}, err
	}
	key := principal.OperatorKeyPrefix + r.Name
	var before *principal.Operator
	var rev uint64
	switch e, err := kv.Get(ctx, key); {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return principal.OperatorAddResponse{}, err
	default:
		var old principal.Operator
		if err := json.Unmarshal(e.Value(), &old); err != nil {
			return principal.OperatorAddResponse{}, fmt.Errorf("registry record %s: %w", key, err)
		}
		if old.Revoked == nil {
			return principal.OperatorAddResponse{}, refused{fmt.Errorf("%w: platform operator %s already exists (added %s by %s, key %s); revoke it first to issue new credentials; nothing was done",
				control.ErrConflict, r.Name, old.Created.UTC().Format(time.RFC3339), orUnknown(old.CreatedBy), old.PublicKey)}
		}
		before, rev = &old, e.Revision()
	}
	sk, err := nkeys.FromSeed([]byte(d.trust.AdminAccountSigningSeed))
	if err != nil {
		return principal.OperatorAddResponse{}, fmt.Errorf("admin account signing key: %w", err)
	}
	skPub, _ := sk.PublicKey()
	uc := jwt.NewUserClaims(r.PublicKey)
	uc.Name = r.Name
	uc.IssuerAccount = d.trust.AdminAccount()
	uc.Tags.Add("platform-operator")
	now := time.Now().UTC()
	op := principal.Operator{Name: r.Name, PublicKey: r.PublicKey, Issuer: skPub, Created: now, CreatedBy: c.p.Name()}
	expiry := "never expires"
	if validity > 0 {
		// Rounded up to the JWT's one-second resolution: valid at least
		// as long as asked.
		exp := now.Add(validity + time.Second - 1).Truncate(time.Second)
		uc.Expires = exp.Unix()
		op.Expires = &exp
		expiry = "expires " + exp.Format(time.RFC3339)
	}
	tok, err := uc.Encode(sk)
	if err != nil {
		return principal.OperatorAddResponse{}, fmt.Errorf("encode user %s: %w", r.Name, err)
	}
	b, _ := json.Marshal(op)
	if before == nil {
		_, err = kv.Create(ctx, key, b)
	} else {
		_, err = kv.Update(ctx, key, b, rev)
	}
	if err != nil {
		if jserr.WrongRevision(err) {
			return principal.OperatorAddResponse{}, refused{fmt.Errorf("%w: platform operator %s was changed concurrently by another request; check `platformctl operator list`; nothing was done", control.ErrConflict, r.Name)}
		}
		return principal.OperatorAddResponse{}, fmt.Errorf("operator registry: %w", err)
	}
	d.auditOperator(ctx, redrive.AuditRecord{Actor: c.p.Name(), Action: principal.ActionOperatorAdd, Target: op.Principal(), Before: before, After: op,
		Detail: "user " + r.PublicKey + " of the platform admin account; " + expiry})
	return principal.OperatorAddResponse{Operator: op, JWT: tok}, nil
}

// revokeOperator revokes r.Name's key in the registry and the broker.
func (d *Daemon) revokeOperator(ctx context.Context, c caller, r principal.OperatorRevokeRequest) (principal.Operator, error) {
	if r.Name == principal.BootstrapAdmin {
		return principal.Operator{}, refused{fmt.Errorf("%w: the bootstrap admin user (trust.json) cannot be revoked: every platformd connects with it; nothing was done", control.ErrConflict)}
	}
	if err := principal.ValidateOperatorName(r.Name); err != nil {
		return principal.Operator{}, invalid(err)
	}
	if err := needOperator(c, "revoke a platform operator"); err != nil {
		return principal.Operator{}, err
	}
	kv, err := d.operatorBucket(ctx, false)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return principal.Operator{}, fmt.Errorf("%w: no platform operator %s (none was ever added)", control.ErrNotFound, r.Name)
	}
	if err != nil {
		return principal.Operator{}, fmt.Errorf("operator registry %s: %w", principal.OperatorBucket, err)
	}
	key := principal.OperatorKeyPrefix + r.Name
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return principal.Operator{}, fmt.Errorf("%w: no platform operator %s (`platformctl operator list` shows them)", control.ErrNotFound, r.Name)
	}
	if err != nil {
		return principal.Operator{}, err
	}
	var op principal.Operator
	if err := json.Unmarshal(e.Value(), &op); err != nil {
		return principal.Operator{}, fmt.Errorf("registry record %s: %w", key, err)
	}
	if op.Revoked != nil {
		return principal.Operator{}, refused{fmt.Errorf("%w: platform operator %s was already revoked at %s by %s", control.ErrConflict, r.Name, op.Revoked.UTC().Format(time.RFC3339), orUnknown(op.RevokedBy))}
	}
	before := op
	now := time.Now().UTC()
	op.Revoked, op.RevokedBy = &now, c.p.Name()
	b, _ := json.Marshal(op)
	// 1. The registry's revocation: every Verifier refuses the key from
	// now on. Kept if a later step fails (retrying the revoke finishes).
	if _, err := kv.Create(ctx, principal.RevokedKeyPrefix+op.PublicKey, b); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return principal.Operator{}, fmt.Errorf("operator registry: record the revocation of %s: %w; nothing was done", r.Name, err)
	}
	// 2. The broker's: the admin account JWT with the key revoked.
	if err := d.pushOperatorRevocations(ctx, false); err != nil {
		return principal.Operator{}, fmt.Errorf("platform operator %s: signed requests are refused from now on, but the broker did not take the revocation (%v): its connections may stay open; retry `platformctl operator revoke %s`", r.Name, err, r.Name)
	}
	// 3. The operator's record.
	if _, err := kv.Update(ctx, key, b, e.Revision()); err != nil {
		return principal.Operator{}, fmt.Errorf("platform operator %s: revoked (registry and broker), but its record was not marked (%v); retry `platformctl operator revoke %s`", r.Name, err, r.Name)
	}
	d.auditOperator(ctx, redrive.AuditRecord{Actor: c.p.Name(), Action: principal.ActionOperatorRevoke, Target: op.Principal(), Before: before, After: op,
		Detail: "user " + op.PublicKey + " revoked in the registry and the platform admin account JWT"})
	return op, nil
}

// listOperators lists the bootstrap admin and the registry, by name.
func (d *Daemon) listOperators(ctx context.Context) ([]principal.Operator, error) {
	out := []principal.Operator{}
	if uc, err := jwt.DecodeUserClaims(d.trust.AdminUserJWT); err == nil {
		admin := principal.Operator{Name: uc.Name, PublicKey: uc.Subject, Issuer: uc.Issuer, Created: time.Unix(uc.IssuedAt, 0).UTC(), Bootstrap: true}
		if uc.Expires > 0 {
			exp := time.Unix(uc.Expires, 0).UTC()
			admin.Expires = &exp
		}
		out = append(out, admin)
	}
	kv, err := d.operatorBucket(ctx, false)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	ops, err := registryRecords(ctx, kv, principal.OperatorKeyPrefix)
	if err != nil {
		return nil, err
	}
	sort.Slice(ops, func(i, j int) bool { return ops[i].Name < ops[j].Name })
	return append(out, ops...), nil
}

// registryRecords reads every record under prefix.
func registryRecords(ctx context.Context, kv jetstream.KeyValue, prefix string) ([]principal.Operator, error) {
	keys, err := kv.ListKeysFiltered(ctx, prefix+">")
	if err != nil {
		return nil, fmt.Errorf("operator registry: %w", err)
	}
	var ops []principal.Operator
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("operator registry %s: %w", k, err)
		}
		var op principal.Operator
		if err := json.Unmarshal(e.Value(), &op); err != nil {
			return nil, fmt.Errorf("registry record %s: %w", k, err)
		}
		ops = append(ops, op)
	}
	return ops, nil
}

// pushOperatorRevocations pushes the admin account JWT with every key the
// registry revoked to every node's resolver, unless (force false) each
// local node's resolver lists them all already. The account's other
// claims (signing keys, limits, earlier revocations) are those of the
// newest JWT the local resolvers hold; the JWT is re-issued (new iat), so
// every node applies it to its in-memory account.
func (d *Daemon) pushOperatorRevocations(ctx context.Context, force bool) error {
	kv, err := d.operatorBucket(ctx, false)
	if err != nil {
		return err
	}
	revoked, err := registryRecords(ctx, kv, principal.RevokedKeyPrefix)
	if err != nil || len(revoked) == 0 {
		return err
	}
	admin := d.trust.AdminAccount()
	base, err := jwt.DecodeAccountClaims(d.trust.AdminAccountJWT)
	if err != nil {
		return fmt.Errorf("trust.json admin account JWT: %w", err)
	}
	lacking := false
	for _, n := range d.nodes {
		srv := n.Server()
		if srv == nil || srv.AccountResolver() == nil {
			continue
		}
		tok, err := srv.AccountResolver().Fetch(admin)
		if err != nil || tok == "" {
			lacking = true
			continue
		}
		ac, err := jwt.DecodeAccountClaims(tok)
		if err != nil {
			lacking = true
			continue
		}
		if ac.IssuedAt > base.IssuedAt {
			base = ac
		}
		for _, op := range revoked {
			if !ac.Revocations.IsRevoked(op.PublicKey, revokedAt(op)) {
				lacking = true
			}
		}
	}
	missing := 0
	for _, op := range revoked {
		if !base.Revocations.IsRevoked(op.PublicKey, revokedAt(op)) {
			base.RevokeAt(op.PublicKey, revokedAt(op))
			missing++
		}
	}
	if missing == 0 && !lacking && !force {
		return nil
	}
	opSK, err := d.trust.OperatorSigningKey()
	if err != nil {
		return fmt.Errorf("operator signing key: %w", err)
	}
	signed, err := base.Encode(opSK)
	if err != nil {
		return fmt.Errorf("encode admin account JWT: %w", err)
	}
	return d.pushAccountJWT(ctx, signed)
}

func revokedAt(op principal.Operator) time.Time {
	if op.Revoked != nil {
		return *op.Revoked
	}
	return time.Now()
}

// reconcileOperatorRevocations re-issues and pushes the admin account JWT
// at start when any operator was ever revoked. Needed: a node whose
// resolver directory was lost starts with trust.json's JWT (no
// revocations) until the resolvers' next sync (2 min), and in tests of a
// full restart with one such node, the other nodes sometimes accepted a
// revoked user although their resolver and /accountz showed the
// revocation, until an account JWT with a new iat arrived
// (TestOperatorRegistry). Best effort: the Verifier refuses revoked
// operators' signed requests throughout.
func (d *Daemon) reconcileOperatorRevocations() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := d.pushOperatorRevocations(ctx, true)
	if err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		d.log.Warn("operators: revocations not re-pushed at start (signed requests of revoked operators are still refused)", "err", err)
	}
}

// pushAccountJWT sends an account JWT to every node's resolver on
// $SYS.REQ.CLAIMS.UPDATE as the system user and checks the replies (as
// tenancy does): a refusal is an error, no reply at all is an error.
func (d *Daemon) pushAccountJWT(ctx context.Context, token string) error {
	urls := make([]string, 0, len(d.nodes))
	for _, n := range d.nodes {
		urls = append(urls, n.ClientURL())
	}
	servers := len(d.nodes)
	if d.cfg.Mode == conf.ModeNode {
		servers = len(d.cfg.Node.Cluster.Routes) + 1
	}
	sys, err := embeddednats.ConnectSystem(d.trust, strings.Join(urls, ","), nats.Name("platform-operators"))
	if err != nil {
		return fmt.Errorf("system connection: %w", err)
	}
	defer sys.Close()
	ok, err := gather.Collect(ctx, sys, "$SYS.REQ.CLAIMS.UPDATE", []byte(token), gather.Options{Want: servers, Wait: 5 * time.Second}, func(msg *nats.Msg) (bool, error) {
		var r server.ServerAPIClaimUpdateResponse
		if err := json.Unmarshal(msg.Data, &r); err != nil {
			return false, fmt.Errorf("claims update: undecodable reply: %w", err)
		}
		if r.Error != nil {
			name := ""
			if r.Server != nil {
				name = r.Server.Name
			}
			return false, fmt.Errorf("claims update refused by node %s: %s", name, r.Error.Description)
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	if ok == 0 {
		return errors.New("claims update: no node replied within 5s")
	}
	if ok < servers {
		d.log.Warn("operators: admin account JWT accepted by fewer nodes than expected; the others sync it from their peers", "accepted", ok, "expected", servers)
	}
	return nil
}

// auditOperator appends r to platform-audit. A failure is logged: the
// change is made and the caller gets its result.
func (d *Daemon) auditOperator(ctx context.Context, r redrive.AuditRecord) {
	if err := redrive.NewStreamAuditor(d.js, d.cfg.Durability().Replicas).Append(ctx, r); err != nil {
		d.log.Error("operators: audit record not written", "action", r.Action, "target", r.Target, "actor", r.Actor, "err", err)
	}
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
