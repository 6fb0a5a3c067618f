package daemon_test

import (
	"strings"
	"testing"
)

// platformd's /metrics carries every series the alert rules join on
// (deploy/prometheus/rules.yaml), with the catalog's values: orders keeps
// 3 days, email-notifier reads orders with the default 300 s tolerance,
// and each stream is reported led once.
func TestMetricsExportAlertRuleInputs(t *testing.T) {
	d, _ := startDaemon(t, 3)
	_, metrics := httpGet(t, d, "/metrics")
	for _, want := range []string{
		`platform_topic_retention_seconds{topic="orders"} 259200`,
		`platform_group_info{group="email-notifier",topic="orders"} 1`,
		`platform_group_tolerance_seconds{group="email-notifier"} 300`,
	} {
		if !strings.Contains(metrics, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for _, stream := range []string{"orders", "shipment-jobs"} {
		n := 0
		for _, line := range strings.Split(metrics, "\n") {
			if strings.HasPrefix(line, "platform_stream_has_leader{") && strings.Contains(line, `stream="`+stream+`"`) {
				n++
				if !strings.HasSuffix(line, "} 1") {
					t.Errorf("%s: %s, want 1", stream, line)
				}
			}
		}
		if n != 1 {
			t.Errorf("%s: %d platform_stream_has_leader series, want 1 (from its leader)", stream, n)
		}
	}
}
