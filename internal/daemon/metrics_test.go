package daemon_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/daemon/daemontest"
)

// platformd's /metrics carries every series the alert rules join on
// (deploy/prometheus/rules.yaml), with the catalog's values: orders keeps
// 3 days, email-notifier reads orders with the default 300 s tolerance,
// and each stream is reported led once.
func TestMetricsExportAlertRuleInputs(t *testing.T) {
	d, _ := startDaemon(t, 3)
	_, metrics := daemontest.HTTPGet(t, d, "/metrics")
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

// The DLQ metrics cover tenant accounts too, labelled
// tenant=<name> under the tenant's own names (read over a platform service
// connection to the account), while the admin account's series keep
// their labels (tenant="": the same series to Prometheus and its rules).
func TestMetricsExportTenantDLQs(t *testing.T) {
	d := daemontest.Start(t, 3)
	d.TenantTopic(t, "acme", "payments", false, 3)
	var metrics string
	natstest.WaitFor(t, 20*time.Second, func() error {
		_, metrics = daemontest.HTTPGet(t, d.Daemon, "/metrics")
		for _, want := range []string{
			`platform_dlq_depth{dlq="payments",owner="payments-team",tenant="acme"} 3`,
			`platform_dlq_entries_near_expiry{dlq="payments",owner="payments-team",tenant="acme"} 0`,
		} {
			if !strings.Contains(metrics, want+"\n") {
				return fmt.Errorf("/metrics lacks %s", want)
			}
		}
		return nil
	})
	fp := 0.0
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, "platform_dlq_fingerprint_depth{") && strings.Contains(line, `tenant="acme"`) {
			v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				t.Fatal(err)
			}
			fp += v
		}
		if strings.HasPrefix(line, "platform_dlq_depth{") && strings.Contains(line, `dlq="payments"`) && !strings.Contains(line, `tenant="acme"`) {
			t.Errorf("acme's DLQ exported outside its tenant: %s", line)
		}
	}
	if fp != 3 {
		t.Errorf("acme's fingerprint depths sum to %v, want 3", fp)
	}
	if !strings.Contains(metrics, `platform_dlq_depth{dlq="orders",owner="`) || !strings.Contains(metrics, `",tenant=""} `) {
		t.Errorf("the admin account's DLQ series (tenant=\"\") are missing")
	}
}
