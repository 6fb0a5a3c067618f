package daemon_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/daemon/daemontest"
	"github.com/msgplatform/platform/platform/schema"
)

// The schema endpoints of a 3-node platformd: the registry bucket is R3;
// refusals are 409 with the rule broken, bad input 400, unknown 404.
func TestSchemaEndpoints(t *testing.T) {
	_, nc, js, ctx := daemontest.StartAdmin(t, 3, 30*time.Second)
	call := func(subj string, req, resp any) error { return control.Call(ctx, nc, subj, req, resp) }

	v1 := json.RawMessage(`{"type":"object","properties":{"orderId":{"type":"string"}},"required":["orderId"]}`)
	v2 := json.RawMessage(`{"type":"object","properties":{"orderId":{"type":"string"},"customerId":{"type":"string"}},"required":["orderId","customerId"]}`)
	var reg schema.Registered
	if err := call(schema.SubjRegister, schema.RegisterRequest{Subject: "OrderPlaced", Schema: v1}, &reg); err != nil || reg.Version.Version != 1 {
		t.Fatalf("register v1: %+v, %v", reg, err)
	}
	st, err := js.Stream(ctx, "KV_"+schema.DefaultBucket)
	if err != nil || st.CachedInfo().Config.Replicas != 3 {
		t.Fatalf("registry bucket: %v, want R3", err)
	}
	err = call(schema.SubjRegister, schema.RegisterRequest{Subject: "OrderPlaced", Schema: v2}, &reg)
	if !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), `backward: field "customerId" became required in v2; data written with v1 may lack it`) {
		t.Fatalf("incompatible v2: %v", err)
	}
	var cr schema.CheckResult
	if err := call(schema.SubjCheck, schema.CheckRequest{Subject: "OrderPlaced", Schema: v2}, &cr); err != nil || cr.Compatible || len(cr.Violations) == 0 {
		t.Fatalf("check: %+v, %v", cr, err)
	}
	var info schema.SubjectInfo
	if err := call(schema.SubjMode, schema.ModeRequest{Subject: "OrderPlaced", Mode: schema.ModeForward}, &info); err != nil || info.Mode != schema.ModeForward {
		t.Fatalf("mode: %+v, %v", info, err)
	}
	if err := call(schema.SubjRegister, schema.RegisterRequest{Subject: "OrderPlaced", Schema: v2}, &reg); err != nil || reg.Version.Version != 2 {
		t.Fatalf("register v2 under forward: %+v, %v", reg, err)
	}
	var list []schema.SubjectInfo
	if err := call(schema.SubjList, nil, &list); err != nil || len(list) != 1 || list[0].Latest != 2 {
		t.Fatalf("list: %+v, %v", list, err)
	}
	var show schema.ShowResponse
	if err := call(schema.SubjShow, schema.ShowRequest{Subject: "OrderPlaced", Version: 1}, &show); err != nil || show.Version.Version != 1 || len(show.Versions) != 2 {
		t.Fatalf("show: %+v, %v", show, err)
	}
	for _, c := range []struct {
		subj string
		req  any
		want error
	}{
		{schema.SubjShow, schema.ShowRequest{Subject: "Nope"}, control.ErrNotFound},
		{schema.SubjShow, schema.ShowRequest{Subject: "OrderPlaced", Version: 7}, control.ErrNotFound},
		{schema.SubjRegister, schema.RegisterRequest{Subject: "Order Placed", Schema: v1}, control.ErrInvalid},
		{schema.SubjRegister, schema.RegisterRequest{Subject: "OrderPlaced", Schema: json.RawMessage(`{"type":"objekt"}`)}, control.ErrInvalid},
		{schema.SubjMode, schema.ModeRequest{Subject: "OrderPlaced", Mode: "sideways"}, control.ErrInvalid},
	} {
		if err := call(c.subj, c.req, nil); !errors.Is(err, c.want) {
			t.Errorf("%s %+v: err = %v, want %v", c.subj, c.req, err, c.want)
		}
	}
}
