package conf_test

import (
	"errors"
	"testing"

	"github.com/msgplatform/platform/conf"
	"github.com/msgplatform/platform/internal/validate"
	"github.com/msgplatform/platform/tenancy"
)

func TestDevYAMLDeclaresTenants(t *testing.T) {
	cfg, err := load(t, "dev.yaml")
	if err != nil {
		t.Fatal(err)
	}
	hr, ok := cfg.Tenants["harbor-retail"]
	if !ok || hr.Quota.PublishRate != 5000 || hr.Quota.Policy != tenancy.PolicyThrottle || hr.Quota.Storage.R3.Disk != 50<<30 {
		t.Fatalf("harbor-retail = %+v", hr)
	}
	if m, ok := cfg.Tenants["meridian"]; !ok || m.Name != "meridian" || m.Quota != tenancy.DefaultQuota() {
		t.Fatalf("meridian = %+v", m)
	}
}

func TestTenantProblemsKeyed(t *testing.T) {
	file := writeFile(t, `
tenants:
  harbor-retail:
    quota:
      publish_rate: -5
      policy: drop
      max_payload: 0
  Bad_Name:
`)
	_, err := load(t, file)
	var ve *validate.Error
	if !errors.As(err, &ve) || !errors.Is(err, conf.ErrInvalid) {
		t.Fatalf("err = %v", err)
	}
	for _, k := range []string{"tenants.harbor-retail.quota.publish_rate", "tenants.harbor-retail.quota.policy", "tenants.harbor-retail.quota.max_payload", "tenants.bad_name.name"} {
		if !ve.Has(k) {
			t.Errorf("no problem keyed %s in:\n%v", k, err)
		}
	}
}
