package daemon_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/msgplatform/platform/conf"
	"github.com/msgplatform/platform/internal/daemon"
	"github.com/msgplatform/platform/internal/daemon/daemontest"
	"github.com/msgplatform/platform/tenancy"
)

// Declared tenants are created on start (and left alone on the next
// start), and their metrics are exported.
func TestDeclaredTenants(t *testing.T) {
	cfg := conf.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.Fabric.Nodes = 1
	cfg.Fabric.Port, cfg.Fabric.ClusterPort = -1, -1
	cfg.Fabric.DataDir = ""
	cfg.Fabric.Durability.Replicas = 1
	cfg.Fabric.Durability.SyncAlways = false
	cfg.HTTP.Listen = "127.0.0.1:0"
	hr := tenancy.DefaultSpec("harbor-retail")
	hr.Quota.PublishRate = 5000
	cfg.Tenants = map[string]tenancy.Spec{"harbor-retail": hr, "meridian": tenancy.DefaultSpec("meridian")}
	cfg.EnsureDefaults()
	for round := range 2 {
		d, err := daemon.New(&cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		if err := d.Start(ctx); err != nil {
			cancel()
			t.Fatalf("round %d: start: %v", round, err)
		}
		ts, err := d.Tenants().List(ctx)
		if err != nil || len(ts) != 2 || ts[0].Name != "harbor-retail" || ts[0].Quota.PublishRate != 5000 {
			t.Fatalf("round %d: tenants %+v, %v", round, ts, err)
		}
		_, body := daemontest.HTTPGet(t, d, "/metrics")
		if !strings.Contains(body, `platform_tenant_publish_events_total{tenant="meridian"}`) {
			t.Errorf("round %d: no tenant metrics", round)
		}
		_ = d.Close(ctx)
		cancel()
	}
}
