package catalog

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/msgplatform/platform/platform"
)

// The catalog collector exports each topic's max_age, each group's topic
// and tolerance (declared, else 300 s); a topic bounded by size only has
// no retention series.
func TestCollector(t *testing.T) {
	rec, _, _, ctx := onFabric(t, 1)
	orders := platform.DefaultTopicSpec("orders")
	orders.Replicas = 1
	clicks := platform.TopicSpec{Name: "clicks", Partitions: 2, Replicas: 1, Retention: platform.Retention{MaxBytes: 1 << 20}}
	cat := platform.Catalog{
		Topics: map[string]platform.TopicSpec{"orders": orders, "clicks": clicks},
		Groups: map[string]platform.GroupSpec{
			"fraud-monitor":  {Name: "fraud-monitor", Topic: "orders", Tolerance: 30 * time.Second},
			"email-notifier": {Name: "email-notifier", Topic: "orders"},
			"heatmap":        {Name: "heatmap", Topic: "clicks"},
		},
	}
	if err := (platform.GroupSpec{Name: "g", Topic: "orders", Tolerance: -time.Second}).Validate(); err == nil || !strings.Contains(err.Error(), "tolerance") {
		t.Fatalf("negative tolerance: %v, want a problem naming tolerance", err)
	}
	if _, err := rec.Apply(ctx, cat, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	c := NewCollector(rec, func(g string) time.Duration { return cat.Groups[g].Tolerance })
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	want := `
# HELP platform_group_info 1 for each consumer group and the topic it reads.
# TYPE platform_group_info gauge
platform_group_info{group="email-notifier",topic="orders"} 1
platform_group_info{group="fraud-monitor",topic="orders"} 1
platform_group_info{group="heatmap",topic="clicks"} 1
# HELP platform_group_tolerance_seconds Oldest unprocessed age the group tolerates before PlatformGroupOldestUnprocessedAboveTolerance fires (groups.<name>.tolerance, default 300 s).
# TYPE platform_group_tolerance_seconds gauge
platform_group_tolerance_seconds{group="email-notifier"} 300
platform_group_tolerance_seconds{group="fraud-monitor"} 30
platform_group_tolerance_seconds{group="heatmap"} 300
# HELP platform_topic_retention_seconds The topic's retention by age (max_age) in seconds.
# TYPE platform_topic_retention_seconds gauge
platform_topic_retention_seconds{topic="orders"} 259200
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}
