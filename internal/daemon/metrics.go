package daemon

import (
	"time"

	"github.com/msgplatform/platform/platform"
)

// registerCatalogMetrics exports the catalog figures the alert rules join
// on (platform_topic_retention_seconds, platform_group_info,
// platform_group_tolerance_seconds; see platform.CatalogCollector), read
// from the broker at scrape time. Group tolerances come from the declared
// catalog (groups.<name>.tolerance); a group applied through the control
// API has the default.
func (d *Daemon) registerCatalogMetrics() {
	groups := d.cfg.Catalog.Groups
	d.reg.MustRegister(platform.NewCatalogCollector(d.rec, func(group string) time.Duration {
		return groups[group].EffectiveTolerance()
	}))
}
