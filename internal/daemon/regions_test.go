package daemon_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/conf"
	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/daemon"
	"github.com/msgplatform/platform/platform"
)

// startRegionsDaemon runs platformd in mode regions: eu (home) and us, one
// node each, orders.eu resident in eu and orders not resident.
func startRegionsDaemon(t *testing.T) (*daemon.Daemon, *nats.Conn) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		cfg := conf.DefaultConfig()
		cfg.Mode = conf.ModeRegions
		cfg.DataDir = t.TempDir()
		cfg.HTTP.Listen = "127.0.0.1:0"
		cfg.Reconcile.AllowReducedReplicas = true
		cfg.Regions.LeafPort = -1
		for _, name := range []string{"eu", "us"} {
			fc := embeddednats.DefaultFabricConfig()
			fc.Region = embeddednats.Region{Name: name}
			fc.Nodes, fc.Port, fc.ClusterPort, fc.DataDir = 1, -1, -1, ""
			fc.LameDuck = 200 * time.Millisecond
			fc.Durability.Replicas = 1
			cfg.Regions.Fabrics = append(cfg.Regions.Fabrics, fc)
		}
		eu, orders := platform.DefaultTopicSpec("orders.eu"), platform.DefaultTopicSpec("orders")
		eu.Partitions, eu.Replicas, eu.Residency = 2, 1, "eu"
		orders.Partitions, orders.Replicas = 2, 1
		cfg.Catalog = platform.Catalog{Topics: map[string]platform.TopicSpec{"orders.eu": eu, "orders": orders}}
		cfg.EnsureDefaults()
		d, err := daemon.New(&cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		err = d.Start(ctx)
		cancel()
		if errors.Is(err, embeddednats.ErrPortInUse) && attempt < 3 {
			continue
		}
		if err != nil {
			t.Fatalf("start: %v", err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = d.Close(ctx)
		})
		nc, err := embeddednats.ConnectAdmin(d.Trust(), d.Nodes()[0].ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return d, nc
	}
}

// TestRegionsControlAPI: the control API refuses a resident mirror with a
// conflict naming the region, mirrors a non-resident topic, creates a
// topic resident in us in us, reports residency and exports mirror lag.
func TestRegionsControlAPI(t *testing.T) {
	d, nc := startRegionsDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()

	err := control.Call(ctx, nc, platform.SubjRegionMirror, platform.MirrorRequest{Topic: "orders.eu", To: "us"}, nil)
	if !errors.Is(err, control.ErrConflict) || !strings.Contains(err.Error(), "resident in eu") {
		t.Fatalf("resident mirror: want a 409 naming eu, got %v", err)
	}
	var st platform.MirrorStatus
	if err := control.Call(ctx, nc, platform.SubjRegionMirror, platform.MirrorRequest{Topic: "orders", To: "us"}, &st); err != nil {
		t.Fatalf("mirror orders: %v", err)
	}
	if st.From != "eu" || st.To != "us" {
		t.Errorf("mirror status %+v", st)
	}

	// A topic resident in us is created in us, not in the home region.
	us := platform.DefaultTopicSpec("payments.us")
	us.Replicas, us.Residency = 1, "us"
	if err := control.Call(ctx, nc, control.SubjTopicApply, control.ApplyTopicRequest{Spec: us}, nil); err != nil {
		t.Fatalf("apply payments.us: %v", err)
	}
	var rep platform.ResidencyReport
	if err := control.Call(ctx, nc, platform.SubjResidencyReport, nil, &rep); err != nil {
		t.Fatal(err)
	}
	where := map[string]string{}
	for _, tr := range rep.Topics {
		where[tr.Topic] = tr.Region
	}
	if where["payments.us"] != "us" || where["orders.eu"] != "eu" || where["orders"] != "eu" || len(rep.Violations) != 0 {
		t.Errorf("report %+v", rep)
	}

	resp, err := http.Get("http://" + d.HTTPAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `platform_mirror_lag_messages{from="eu",to="us",topic="orders"}`) {
		t.Errorf("metrics lack platform_mirror_lag_messages for orders")
	}
	if !strings.Contains(string(body), "platform_mirror_lag_seconds") {
		t.Errorf("metrics lack platform_mirror_lag_seconds")
	}
}

// TestRegionsResidencyGuard: a mirror of the resident orders.eu made in us
// directly through the JetStream API (bypassing the control API) is
// refused at the request by platformd's residency gate: the requester gets
// a JetStream API error naming the topic and its region, the stream never
// exists, and us's audit holds the refusal (remedy "refused").
func TestRegionsResidencyGuard(t *testing.T) {
	d, nc := startRegionsDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	// us reached through the link (domain us): the test holds only a
	// connection to the home region.
	jsUS, err := jetstream.NewWithDomain(nc, "us")
	if err != nil {
		t.Fatal(err)
	}
	jsEU, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	rogue := jetstream.StreamConfig{Name: "rogue_orders_eu", Mirror: &jetstream.StreamSource{Name: platform.StreamName("orders.eu"), Domain: "eu"}}
	_, err = jsUS.CreateStream(ctx, rogue)
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != platform.GateErrCode || !strings.Contains(apiErr.Description, "topic orders.eu is resident in eu") {
		t.Fatalf("create hand-made mirror in us: want the residency gate's APIError naming orders.eu and eu, got %T %v", err, err)
	}
	if _, err := jsUS.Stream(ctx, rogue.Name); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("refused mirror exists in us: %v", err)
	}
	rs := platform.Regions{{Name: "eu", Domain: "eu", JS: jsEU}, {Name: "us", Domain: "us", JS: jsUS}}
	deadline := time.Now().Add(15 * time.Second)
	for {
		audit, aerr := rs.ResidencyAudit(ctx, "us")
		if aerr == nil && len(audit) == 1 {
			if audit[0].Stream != rogue.Name || audit[0].Remedy != "refused" || audit[0].Action != "create" || !strings.Contains(strings.Join(audit[0].Problems, ";"), "topic orders.eu is resident in eu") {
				t.Fatalf("audit record %+v", audit[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no audit record of the refusal in us: %v (%v)", audit, aerr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	resp, err := http.Get("http://" + d.HTTPAddr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "platform_residency_refused_requests_total 1") {
		t.Errorf("metrics lack platform_residency_refused_requests_total 1")
	}
	// A legitimate hand-made stream still passes the gate.
	if _, err := jsUS.CreateStream(ctx, jetstream.StreamConfig{Name: "us_plain", Subjects: []string{"us.plain.>"}}); err != nil {
		t.Fatalf("plain stream in us through the gate: %v", err)
	}
}
