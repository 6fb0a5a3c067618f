package daemon_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/daemon"
	"github.com/msgplatform/platform/internal/daemon/daemontest"
	"github.com/msgplatform/platform/internal/principal"
	"github.com/msgplatform/platform/internal/principal/principaltest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/tenancy"
)

// addOperator asks for operator name as s; it returns the .creds.
func addOperator(ctx context.Context, nc *nats.Conn, s *principal.Signer, name string) ([]byte, principal.OperatorAddResponse, error) {
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	var resp principal.OperatorAddResponse
	if err := signedCall(ctx, nc, s, time.Time{}, principal.SubjOperatorAdd, principal.OperatorAddRequest{Name: name, PublicKey: pub}, &resp); err != nil {
		return nil, resp, err
	}
	creds, err := jwt.FormatUserConfig(resp.JWT, seed)
	return creds, resp, err
}

func listOperators(t *testing.T, ctx context.Context, nc *nats.Conn) map[string]principal.Operator {
	t.Helper()
	var ops []principal.Operator
	if err := control.Call(ctx, nc, principal.SubjOperatorList, struct{}{}, &ops); err != nil {
		t.Fatal(err)
	}
	m := map[string]principal.Operator{}
	for _, o := range ops {
		m[o.Name] = o
	}
	return m
}

// The operator registry through the control API on a 3-node fabric:
// concurrent adds of one name (compare-and-set: exactly one wins), the
// callers that may not add (unsigned, a tenant's user), bad keys; then a
// revocation survives a restart of every node, one of which lost its copy
// of the pushed admin account JWT: the Verifier refuses the revoked key at
// once (registry), and every node's broker refuses it once platformd has
// re-pushed the JWT at start (nodes that kept their copy keep it: the
// preload of trust.json's older JWT does not replace it).
func TestOperatorRegistry(t *testing.T) {
	d, nc, js, ctx := daemontest.StartAdmin(t, 3, 3*time.Minute)
	adminCreds, _ := d.Trust().AdminCreds()
	admin := signer(t, adminCreds)

	// 8 concurrent adds of carol: one wins, the others are refused.
	const n = 8
	var wg sync.WaitGroup
	keys := make([]string, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, resp, err := addOperator(ctx, nc, admin, "carol")
			keys[i], errs[i] = resp.Operator.PublicKey, err
		}()
	}
	wg.Wait()
	won, winner := 0, ""
	for i, err := range errs {
		switch {
		case err == nil:
			won, winner = won+1, keys[i]
		case !errors.Is(err, control.ErrConflict):
			t.Errorf("concurrent add %d: %v, want a conflict", i, err)
		}
	}
	if won != 1 {
		t.Fatalf("%d of %d concurrent adds of carol succeeded, want 1: %v", won, n, errs)
	}
	// The registry is read from its stream leader (no direct gets: a
	// replica behind would answer "not revoked").
	if st, err := js.Stream(ctx, "KV_"+principal.OperatorBucket); err != nil || st.CachedInfo().Config.AllowDirect {
		t.Fatalf("operator registry stream: err %v, direct gets on: %v", err, err == nil && st.CachedInfo().Config.AllowDirect)
	}
	ops := listOperators(t, ctx, nc)
	if ops["carol"].PublicKey != winner || ops["carol"].CreatedBy != "admin@platform" || !ops["admin"].Bootstrap {
		t.Fatalf("registry after the race: %+v (winner %s)", ops, winner)
	}

	// Who may not add, and bad input: refused, nothing recorded.
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	if err := control.Call(ctx, nc, principal.SubjOperatorAdd, principal.OperatorAddRequest{Name: "mallory", PublicKey: pub}, new(principal.OperatorAddResponse)); !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), "--user-creds") {
		t.Fatalf("unsigned add: %v", err)
	}
	if _, err := d.Tenants().Create(ctx, "test", tenancy.DefaultSpec("harbor")); err != nil {
		t.Fatal(err)
	}
	spec := platform.DefaultTopicSpec("ledger")
	spec.Replicas = 1
	if _, err := d.Tenants().ApplyTopic(ctx, "test", "harbor", spec, catalog.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	uc, err := d.Tenants().AddUser(ctx, "test", "harbor", tenancy.UserSpec{Name: "hank", Pub: []string{"ledger"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := addOperator(ctx, nc, signer(t, uc.Creds), "mallory"); !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), "hank@harbor is a user of tenant harbor") {
		t.Fatalf("add signed by a tenant user: %v", err)
	}
	if err := signedCall(ctx, nc, admin, time.Time{}, principal.SubjOperatorAdd, principal.OperatorAddRequest{Name: "mallory", PublicKey: "not-a-key"}, new(principal.OperatorAddResponse)); !errors.Is(err, control.ErrInvalid) || !strings.Contains(err.Error(), "not a user nkey") {
		t.Fatalf("bad public key: %v", err)
	}
	if err := signedCall(ctx, nc, admin, time.Time{}, principal.SubjOperatorRevoke, principal.OperatorRevokeRequest{Name: "admin"}, new(principal.Operator)); !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), "cannot be revoked") {
		t.Fatalf("revoke the bootstrap admin: %v", err)
	}
	if got := listOperators(t, ctx, nc); len(got) != 2 {
		t.Fatalf("refused requests changed the registry: %+v", got)
	}

	// Revoke dave, restart every node: still refused everywhere.
	daveCreds, daveResp, err := addOperator(ctx, nc, admin, "dave")
	if err != nil {
		t.Fatal(err)
	}
	dave := signer(t, daveCreds)
	erinCreds, _, err := addOperator(ctx, nc, admin, "erin")
	if err != nil {
		t.Fatal(err)
	}
	erin := signer(t, erinCreds)
	if err := signedCall(ctx, nc, erin, time.Time{}, principal.SubjOperatorRevoke, principal.OperatorRevokeRequest{Name: "dave"}, new(principal.Operator)); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	closeCtx, closeCancel := context.WithTimeout(ctx, 30*time.Second)
	if err := d.Close(closeCtx); err != nil {
		t.Logf("close: %v", err)
	}
	closeCancel()
	// One node loses its copy of the pushed admin account JWT (a lost
	// resolver directory): it starts with trust.json's preload, which does
	// not revoke dave, until platformd re-pushes at start.
	var jwts []string
	_ = filepath.WalkDir(d.Config.DataDir, func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.Name() == d.Trust().AdminAccount()+".jwt" {
			jwts = append(jwts, p)
		}
		return nil
	})
	if len(jwts) != 3 {
		t.Fatalf("resolver files of the admin account: %v, want one per node", jwts)
	}
	if err := os.Remove(jwts[2]); err != nil {
		t.Fatal(err)
	}
	d2, err := daemon.New(d.Config, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d2.Start(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_ = d2.Close(c)
	})
	// The Verifier refuses dave at once (the registry) ...
	nc2 := daemontest.Admin(t, d2.Trust(), d2.Nodes()[0].ClientURL())
	err = signedCall(ctx, nc2, dave, time.Time{}, principal.SubjOperatorAdd, principal.OperatorAddRequest{Name: "frank", PublicKey: pub}, new(principal.OperatorAddResponse))
	if !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), "dave@platform") || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("revoked dave after the restart: %v", err)
	}
	// ... and every node's broker once platformd re-pushed the admin
	// account JWT at start (bounded wait).
	daveFile := principaltest.WriteCreds(t, "dave", daveCreds)
	for _, node := range d2.Nodes() {
		deadline := time.Now().Add(15 * time.Second)
		for {
			tok, err := node.Server().AccountResolver().Fetch(d2.Trust().AdminAccount())
			if err != nil {
				t.Fatal(err)
			}
			ac, err := jwt.DecodeAccountClaims(tok)
			if err != nil {
				t.Fatal(err)
			}
			revoked := ac.Revocations.IsRevoked(daveResp.Operator.PublicKey, time.Now().Add(-time.Minute))
			dnc, cerr := nats.Connect(node.ClientURL(), nats.UserCredentials(daveFile), nats.NoReconnect())
			if cerr == nil {
				dnc.Close()
			}
			if revoked && cerr != nil && strings.Contains(cerr.Error(), "Authorization Violation") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %s 15 s after the restart: admin account JWT revokes dave %v, dave's connection: %v", node.Server().Name(), revoked, cerr)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if _, _, err := addOperator(ctx, nc2, erin, "frank"); err != nil {
		t.Fatalf("erin after the restart: %v", err)
	}
	if ops := listOperators(t, ctx, nc2); ops["dave"].Revoked == nil || ops["dave"].RevokedBy != "erin@platform" || ops["frank"].CreatedBy != "erin@platform" {
		t.Fatalf("registry after the restart: %+v", ops)
	}
}
