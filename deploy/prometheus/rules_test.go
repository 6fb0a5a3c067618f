package prometheus

import (
	"context"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
)

// pending are metrics the rules use that no code exports yet, and who is
// to export them. When one lands, remove it here (the test fails until
// then, so the list cannot go stale).
var pending = map[string]string{}

func loadRules(t *testing.T) *rulefmt.RuleGroups {
	t.Helper()
	rgs, errs := rulefmt.ParseFile("rules.yaml", false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, err := range errs {
		t.Error(err)
	}
	if rgs == nil || len(errs) > 0 {
		t.Fatal("rules.yaml does not parse")
	}
	return rgs
}

// goSources is every non-test Go file of the module, concatenated.
func goSources(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) && path != "../.." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		b.Write(data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func metricNames(t *testing.T, expr string) []string {
	t.Helper()
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			names = append(names, vs.Name)
		}
		return nil
	})
	return names
}

func TestRulesParseAndAreDocumented(t *testing.T) {
	rgs := loadRules(t)
	src := goSources(t)
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	n := 0
	for _, g := range rgs.Groups {
		for _, r := range g.Rules {
			n++
			name := r.Alert
			if name == "" {
				t.Errorf("group %s: recording rule %s: only alerts belong here", g.Name, r.Record)
				continue
			}
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("%s: severity label %q, want warning or critical", name, s)
			}
			for _, a := range []string{"summary", "description", "runbook"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s: no %s annotation", name, a)
				}
			}
			if !strings.Contains(r.Annotations["runbook"], "README.md#"+strings.ToLower(name)) {
				t.Errorf("%s: runbook %q does not point at its README section", name, r.Annotations["runbook"])
			}
			if !strings.Contains(string(readme), "| "+name+" |") || !strings.Contains(string(readme), "### "+name) {
				t.Errorf("%s: no row in the README table or no runbook section", name)
			}
			for _, m := range metricNames(t, r.Expr) {
				used[m] = true
				inCode := strings.Contains(src, `"`+m+`"`)
				_, isPending := pending[m]
				switch {
				case !inCode && !isPending:
					t.Errorf("%s: metric %s is neither exported by the code nor listed as pending", name, m)
				case inCode && isPending:
					t.Errorf("%s: metric %s is exported now: remove it from the pending list and the README's pending notes", name, m)
				case isPending && !strings.Contains(r.Annotations["description"], "PENDING"):
					t.Errorf("%s: uses pending metric %s but its description does not say PENDING", name, m)
				}
			}
		}
	}
	for m := range pending {
		if !used[m] {
			t.Errorf("pending metric %s is used by no rule", m)
		}
		if !strings.Contains(string(readme), m) {
			t.Errorf("pending metric %s is not named in the README", m)
		}
	}
	t.Logf("%d alert rules, %d metrics", n, len(used))
}

// firing fabricates, per alert, series that must make it fire (evaluated
// at 20m; `for` durations are not evaluated, only the condition).
var firing = map[string]string{
	"PlatformGroupOldestUnprocessedAboveTolerance": `platform_consumer_oldest_unprocessed_seconds{group="g",partition="0"} 400x20`,
	"PlatformGroupLagApproachingRetention": `platform_consumer_oldest_unprocessed_seconds{group="g",partition="0"} 200000x20
  platform_group_info{group="g",topic="orders"} 1x20
  platform_topic_retention_seconds{topic="orders"} 259200x20`,
	"PlatformClockSkewNegativeLag": `platform_consumer_oldest_unprocessed_seconds{group="g",partition="0"} -30x20`,
	"PlatformClockSkewLagJump":     `platform_consumer_oldest_unprocessed_seconds{group="g",partition="0"} 100+60x15 9000x4`,
	"PlatformCanaryMissing": `platform_canary_age_seconds{topic="orders",group="g"} 500x20
  platform_canary_tolerance_seconds 180x20`,
	"PlatformDLQNotEmpty":                  `platform_dlq_depth{dlq="orders",owner="checkout"} 3x20`,
	"PlatformDLQDepthHigh":                 `platform_dlq_depth{dlq="orders",owner="checkout"} 5000x20`,
	"PlatformDLQOldestEntryOld":            `platform_dlq_oldest_age_seconds{dlq="orders",owner="checkout"} 100000x20`,
	"PlatformDLQApproachingRetention":      `platform_dlq_oldest_age_retention_ratio{dlq="orders",owner="checkout"} 0.85x20`,
	"PlatformOutboxOldestUnsent":           `outboxrelay_oldest_unsent_age_seconds{outbox="orders"} 120x20`,
	"PlatformOutboxUnknownPublishOutcomes": `outboxrelay_publishes_total{outbox="orders",outcome="unknown"} 0+1x20`,
	"PlatformPublisherUnknownOutcomes":     `platform_publish_outcomes_total{topic="orders",outcome="unknown"} 0+1x20`,
	"PlatformStreamUnderReplicated":        `platform_stream_replicas_lagging{server="n1",stream="orders"} 1x20`,
	"PlatformJetStreamMetaLostQuorum":      `platform_jetstream_meta_has_leader{server="n1",region="eu"} 0x20`,
	"PlatformStreamNoLeader":               `platform_stream_has_leader{stream="orders"} 0x20`,
	"PlatformMirrorLag":                    `platform_mirror_lag_seconds{topic="orders",from="eu",to="us"} 600x20`,
	"PlatformTenantThrottled":              `platform_tenant_publish_throttled_total{tenant="harbor-retail"} 0+100x20`,
}

// healthy is a fabric where no alert may fire.
const healthy = `load 1m
  platform_consumer_oldest_unprocessed_seconds{group="g",partition="0"} 5x20
  platform_group_info{group="g",topic="orders"} 1x20
  platform_topic_retention_seconds{topic="orders"} 259200x20
  platform_canary_age_seconds{topic="orders",group="g"} 70x20
  platform_canary_tolerance_seconds 180x20
  platform_dlq_depth{dlq="orders",owner="checkout"} 0x20
  platform_dlq_oldest_age_seconds{dlq="orders",owner="checkout"} 0x20
  platform_dlq_oldest_age_retention_ratio{dlq="orders",owner="checkout"} 0x20
  outboxrelay_oldest_unsent_age_seconds{outbox="orders"} 0x20
  outboxrelay_publishes_total{outbox="orders",outcome="unknown"} 3x20
  platform_publish_outcomes_total{topic="orders",outcome="unknown"} 3x20
  platform_stream_replicas_lagging{server="n1",stream="orders"} 0x20
  platform_jetstream_meta_has_leader{server="n1",region="eu"} 1x20
  platform_stream_has_leader{stream="orders"} 1x20
  platform_mirror_lag_seconds{topic="orders",from="eu",to="us"} 1x20
  platform_tenant_publish_throttled_total{tenant="harbor-retail"} 7x20
`

func evalAt(t *testing.T, engine *promql.Engine, load, expr string) promql.Vector {
	t.Helper()
	st := promqltest.LoadedStorage(t, load)
	q, err := engine.NewInstantQuery(context.Background(), st, nil, expr, time.Unix(0, 0).Add(20*time.Minute))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	defer q.Close()
	res := q.Exec(context.Background())
	if res.Err != nil {
		t.Fatalf("%s: %v", expr, res.Err)
	}
	v, err := res.Vector()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestEveryAlertFiresOnItsCondition(t *testing.T) {
	rgs := loadRules(t)
	engine := promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery)
	for _, g := range rgs.Groups {
		for _, r := range g.Rules {
			fixture, ok := firing[r.Alert]
			if !ok {
				t.Errorf("%s: no firing fixture", r.Alert)
				continue
			}
			if v := evalAt(t, engine, "load 1m\n  "+fixture+"\n", r.Expr); len(v) == 0 {
				t.Errorf("%s does not fire on\n%s", r.Alert, fixture)
			}
			if v := evalAt(t, engine, healthy, r.Expr); len(v) != 0 {
				t.Errorf("%s fires on the healthy fixture: %v", r.Alert, v)
			}
		}
	}
}

// The canary alert follows the exported tolerance, and falls back to 180 s
// without it.
func TestCanaryMissingFollowsTolerance(t *testing.T) {
	rgs := loadRules(t)
	engine := promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery)
	var expr string
	for _, g := range rgs.Groups {
		for _, r := range g.Rules {
			if r.Alert == "PlatformCanaryMissing" {
				expr = r.Expr
			}
		}
	}
	for _, c := range []struct {
		load string
		fire bool
	}{
		{`platform_canary_age_seconds{topic="orders",group="g"} 500x20
  platform_canary_tolerance_seconds 600x20`, false},
		{`platform_canary_age_seconds{topic="orders",group="g"} 1.5x20
  platform_canary_tolerance_seconds 0.6x20`, true},
		{`platform_canary_age_seconds{topic="orders",group="g"} 200x20`, true},
		{`platform_canary_age_seconds{topic="orders",group="g"} 100x20`, false},
	} {
		v := evalAt(t, engine, "load 1m\n  "+c.load+"\n", expr)
		if fired := len(v) > 0; fired != c.fire {
			t.Errorf("fired = %v, want %v on\n%s", fired, c.fire, c.load)
		}
		if len(v) > 0 && (v[0].Metric.Get("topic") != "orders" || v[0].Metric.Get("group") != "g") {
			t.Errorf("alert labels %v, want topic and group", v[0].Metric)
		}
	}
}

// ruleExpr returns the expression of the named alert.
func ruleExpr(t *testing.T, alert string) string {
	t.Helper()
	for _, g := range loadRules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == alert {
				return r.Expr
			}
		}
	}
	t.Fatalf("no alert %s", alert)
	return ""
}

// The first alert follows each group's exported tolerance
// (platform_group_tolerance_seconds), and falls back to 300 s for a group
// without one; it fires per group, not for its neighbours.
func TestGroupAboveToleranceFollowsTolerance(t *testing.T) {
	expr := ruleExpr(t, "PlatformGroupOldestUnprocessedAboveTolerance")
	engine := promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery)
	for _, c := range []struct {
		load string
		want []string // groups firing
	}{
		{`platform_consumer_oldest_unprocessed_seconds{group="fraud",partition="0"} 90x20
  platform_consumer_oldest_unprocessed_seconds{group="analytics",partition="0"} 90x20
  platform_group_tolerance_seconds{group="fraud"} 60x20
  platform_group_tolerance_seconds{group="analytics"} 3600x20`, []string{"fraud"}},
		{`platform_consumer_oldest_unprocessed_seconds{group="analytics",partition="3"} 1000x20
  platform_group_tolerance_seconds{group="analytics"} 3600x20`, nil},
		{`platform_consumer_oldest_unprocessed_seconds{group="g",partition="0"} 301x20`, []string{"g"}},
		{`platform_consumer_oldest_unprocessed_seconds{group="g",partition="0"} 299x20`, nil},
	} {
		v := evalAt(t, engine, "load 1m\n  "+c.load+"\n", expr)
		var got []string
		for _, s := range v {
			got = append(got, s.Metric.Get("group"))
		}
		if strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("fired for %v, want %v on\n%s", got, c.want, c.load)
		}
	}
}

// Lag vs retention joins the group to its topic (platform_group_info) and
// the topic's max_age: 50% of 3 days fires, 40% does not, and another
// topic's shorter retention does not count.
func TestLagApproachingRetentionJoinsGroupToTopic(t *testing.T) {
	expr := ruleExpr(t, "PlatformGroupLagApproachingRetention")
	engine := promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery)
	const catalog = `
  platform_group_info{group="g",topic="orders"} 1x20
  platform_group_info{group="h",topic="clicks"} 1x20
  platform_topic_retention_seconds{topic="orders"} 259200x20
  platform_topic_retention_seconds{topic="clicks"} 3600x20`
	for _, c := range []struct {
		age  string
		fire bool
	}{{"130000", true}, {"103680", false}} {
		load := "load 1m\n  platform_consumer_oldest_unprocessed_seconds{group=\"g\",partition=\"0\"} " + c.age + "x20" + catalog + "\n"
		v := evalAt(t, engine, load, expr)
		if fired := len(v) > 0; fired != c.fire {
			t.Errorf("age %s s of 3 days: fired = %v, want %v", c.age, fired, c.fire)
		}
		if len(v) > 0 && v[0].Metric.Get("group") != "g" {
			t.Errorf("alert labels %v, want group g", v[0].Metric)
		}
	}
}
