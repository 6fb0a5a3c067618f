package redrive

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/platform"
)

// The collector exports depth and oldest age per DLQ and per error
// fingerprint, the top K fingerprints by name and the rest as "other",
// and counts the entries past the expiry warning fraction of the DLQ's
// retention.
func TestCollectorFingerprintsAndExpiry(t *testing.T) {
	t.Parallel()
	f := natstest.RunFabric(t, 1)
	js := f.JetStream()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ts := platform.DefaultTopicSpec("payments")
	ts.Replicas, ts.Owner = 1, "checkout"
	ts.DLQ = platform.DLQSpec{Owner: "payments-oncall"}
	if _, err := platform.NewReconciler(js, platform.ReconcilerOptions{DefaultReplicas: 1}).ApplyTopic(ctx, ts, platform.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	// 12 reasons: "card declined" 30 times (ids vary, one fingerprint),
	// "gateway <word>" 20 down to 10 times for 11 others.
	words := []string{"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo"}
	seq := uint64(0)
	dead := func(class platform.ErrorClass, reason string) {
		seq++
		h := nats.Header{}
		h.Set(platform.HeaderDLQReason, reason)
		h.Set(platform.HeaderDLQClass, string(class))
		h.Set(platform.HeaderDLQStream, "payments")
		h.Set(platform.HeaderDLQSeq, strconv.FormatUint(seq, 10))
		h.Set(platform.HeaderDLQGroup, "ledger")
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: platform.DLQSubject("payments", "ledger-p0", seq), Header: h, Data: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	for i := range 30 {
		dead(platform.ClassPermanent, fmt.Sprintf("card %d declined", 4000+i))
	}
	total := 30
	for k, w := range words {
		for range 20 - k {
			dead(platform.ClassTransient, "gateway "+w+" unavailable")
			total++
		}
	}
	svc, err := New(js, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	c := svc.Collector().(*collector)
	c.topK = 5

	gather := func() map[string][]*dto.Metric {
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(c)
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]*dto.Metric{}
		for _, f := range fams {
			out[f.GetName()] = f.GetMetric()
		}
		return out
	}
	label := func(m *dto.Metric, name string) string {
		for _, l := range m.GetLabel() {
			if l.GetName() == name {
				return l.GetValue()
			}
		}
		return ""
	}
	got := gather()
	if v := got["platform_dlq_depth"][0].GetGauge().GetValue(); int(v) != total {
		t.Errorf("depth %v, want %d", v, total)
	}
	if o := label(got["platform_dlq_depth"][0], "owner"); o == "" {
		t.Errorf("depth has no owner label")
	}
	fps := map[string]float64{}
	sum := 0.0
	for _, m := range got["platform_dlq_fingerprint_depth"] {
		if label(m, "dlq") != "payments" {
			continue
		}
		fps[label(m, "fingerprint")] = m.GetGauge().GetValue()
		sum += m.GetGauge().GetValue()
	}
	card := Fingerprint(string(platform.ClassPermanent), "card 4000 declined")
	if len(fps) != 6 || fps[card] != 30 || fps[Fingerprint(string(platform.ClassTransient), "gateway alpha unavailable")] != 20 {
		t.Errorf("fingerprint depths %v: want the top 5 (card declined: 30, gateway alpha: 20, ...) and other", fps)
	}
	// Beyond the top 5 (30, 20, 19, 18, 17): 16+15+...+10 = 91.
	if fps[OtherFingerprint] != 91 || int(sum) != total {
		t.Errorf("other %v (want 91), sum %v (want %d)", fps[OtherFingerprint], sum, total)
	}
	for _, m := range got["platform_dlq_fingerprint_oldest_age_seconds"] {
		if age := m.GetGauge().GetValue(); age < 0 || age > time.Since(start).Seconds()+1 {
			t.Errorf("fingerprint %s oldest age %v", label(m, "fingerprint"), age)
		}
	}
	if v := got["platform_dlq_entries_near_expiry"][0].GetGauge().GetValue(); v != 0 {
		t.Errorf("near expiry now: %v, want 0", v)
	}
	// 12 of 14 days later every entry is past 80 % of the retention.
	c.clock = func() time.Time { return time.Now().Add(12 * 24 * time.Hour) }
	got = gather()
	if v := got["platform_dlq_entries_near_expiry"][0].GetGauge().GetValue(); int(v) != total {
		t.Errorf("near expiry 12 days on: %v, want %d", v, total)
	}
	if v := got["platform_dlq_fingerprint_oldest_age_seconds"][0].GetGauge().GetValue(); v < (12 * 24 * time.Hour).Seconds() {
		t.Errorf("oldest age 12 days on: %v", v)
	}
}
