package redrive

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/dlq"
)

// The collector exports depth and oldest age per DLQ and per error
// fingerprint, the top K fingerprints by name and the rest as "other",
// and counts the entries past the expiry warning fraction of the DLQ's
// retention.
func TestCollectorFingerprintsAndExpiry(t *testing.T) {
	t.Parallel()
	ts := topic("payments", "checkout", "")
	ts.DLQ = platform.DLQSpec{Owner: "payments-oncall"}
	js := newEnv(t, ts).js
	ctx := natstest.Context(t, 60*time.Second)
	// 12 reasons: "card declined" 30 times (ids vary, one fingerprint),
	// "gateway <word>" 20 down to 10 times for 11 others.
	words := []string{"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo"}
	seq := uint64(0)
	dead := func(class dlq.ErrorClass, reason string) {
		seq++
		h := nats.Header{}
		h.Set(dlq.HeaderReason, reason)
		h.Set(dlq.HeaderClass, string(class))
		h.Set(dlq.HeaderStream, "payments")
		h.Set(dlq.HeaderSeq, strconv.FormatUint(seq, 10))
		h.Set(dlq.HeaderGroup, "ledger")
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: platform.DLQSubject("payments", "ledger-p0", seq), Header: h, Data: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	for i := range 30 {
		dead(dlq.ClassPermanent, fmt.Sprintf("card %d declined", 4000+i))
	}
	total := 30
	for k, w := range words {
		for range 20 - k {
			dead(dlq.ClassTransient, "gateway "+w+" unavailable")
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
	card := Fingerprint(string(dlq.ClassPermanent), "card 4000 declined")
	if len(fps) != 6 || fps[card] != 30 || fps[Fingerprint(string(dlq.ClassTransient), "gateway alpha unavailable")] != 20 {
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

// TenantCollector exports a tenant account's DLQs with tenant=<name>
// (named without the account's stored prefix), next to the admin
// account's series (tenant=""), in one registry; the tenant connection is
// made once and closed with the service.
func TestTenantCollectorExportsTenantDLQs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, topic("orders", "checkout", ""), topic("stored.payments", "payments-team", ""))
	e.deadLetter("orders", "email-notifier", 0, 2, permanent("template %d missing"))
	e.deadLetter("stored.payments", "ledger", 0, 4, permanent("card number %d is not a number"))
	svc := e.service(nil)
	var (
		mu    sync.Mutex
		conns []*nats.Conn
	)
	tc := svc.TenantCollector(TenantAccounts{
		List: func(context.Context) ([]string, error) { return []string{"harbor"}, nil },
		Connect: func(context.Context, string) (*nats.Conn, error) {
			nc := e.f.Conn()
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
			return nc, nil
		},
		NamePrefix: "stored.",
	})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(svc.Collector(), tc)
	series := func() map[string]float64 {
		t.Helper()
		fams, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, f := range fams {
			for _, m := range f.GetMetric() {
				k := f.GetName() + "{"
				for _, l := range m.GetLabel() {
					if l.GetName() != "fingerprint" && l.GetName() != "class" {
						k += l.GetName() + "=" + l.GetValue() + ","
					}
				}
				out[k+"}"] += m.GetGauge().GetValue()
			}
		}
		return out
	}
	got := series()
	for k, want := range map[string]float64{
		"platform_dlq_depth{dlq=payments,owner=payments-team,tenant=harbor,}":               4,
		"platform_dlq_fingerprint_depth{dlq=payments,owner=payments-team,tenant=harbor,}":   4,
		"platform_dlq_depth{dlq=orders,owner=checkout,tenant=,}":                            2,
		"platform_dlq_fingerprint_depth{dlq=orders,owner=checkout,tenant=,}":                2,
		"platform_dlq_entries_near_expiry{dlq=payments,owner=payments-team,tenant=harbor,}": 0,
	} {
		if v, ok := got[k]; !ok || v != want {
			t.Errorf("%s = %v (present %t), want %v", k, v, ok, want)
		}
	}
	if _, ok := got["platform_dlq_oldest_age_seconds{dlq=payments,owner=payments-team,tenant=harbor,}"]; !ok {
		t.Errorf("no oldest age of harbor's DLQ in %v", got)
	}
	series()
	mu.Lock()
	n := len(conns)
	mu.Unlock()
	if n != 1 {
		t.Fatalf("%d tenant connections over two scrapes, want 1", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := svc.Close(ctx); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 5*time.Second, func() error {
		if !conns[0].IsClosed() {
			return errors.New("the tenant connection is still open after the service closed")
		}
		return nil
	})
}
