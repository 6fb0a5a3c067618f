package conf_test

import (
	"testing"

	"github.com/msgplatform/platform/conf"
)

func TestLoadDevRegions(t *testing.T) {
	cfg, err := conf.Load(conf.LoadOptions{File: "dev-regions.yaml", Env: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Mode != conf.ModeRegions || len(cfg.Regions.Fabrics) != 2 {
		t.Fatalf("mode %s, %d regions", cfg.Mode, len(cfg.Regions.Fabrics))
	}
	eu, us := cfg.Regions.Fabrics[0], cfg.Regions.Fabrics[1]
	if eu.Region.Domain != "eu" || us.Region.Domain != "us" || us.DataDir != "data-regions/us" {
		t.Errorf("regions %+v %+v", eu, us)
	}
	if cfg.Catalog.Topics["orders.eu"].Residency != "eu" {
		t.Errorf("orders.eu residency %q", cfg.Catalog.Topics["orders.eu"].Residency)
	}
}
