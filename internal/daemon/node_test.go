package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/msgplatform/platform/conf"
	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/daemon/daemontest"
	"github.com/msgplatform/platform/platform"
)

// TestNodeModeThreeDaemons runs three platformd processes' worth of daemons
// in node mode (one node each, as on three hosts), started at the same
// time with the same catalog: they form one region, reconcile concurrently
// without conflict, and each serves the control API.
func TestNodeModeThreeDaemons(t *testing.T) {
	root := t.TempDir()
	trust, err := embeddednats.NewTrust()
	if err != nil {
		t.Fatal(err)
	}
	ports := natstest.FreePorts(t, 6)
	clientPorts, routePorts := ports[:3], ports[3:]
	orders := platform.DefaultTopicSpec("orders")
	orders.Partitions = 4
	cfgs := daemontest.ClusterConfigs(t, trust, root, clientPorts, routePorts)
	for _, cfg := range cfgs {
		cfg.Catalog = platform.Catalog{Topics: map[string]platform.TopicSpec{"orders": orders}}
		cfg.EnsureDefaults()
	}
	ds, err := daemontest.StartAll(t, cfgs, 90*time.Second)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	for i, d := range ds {
		if err := d.Ready(); err != nil {
			t.Fatalf("node %d not ready: %v", i+1, err)
		}
	}
	nc := daemontest.Admin(t, trust, fmt.Sprintf("nats://127.0.0.1:%d", clientPorts[2]))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var st control.Status
	if err := control.Call(ctx, nc, control.SubjStatus, nil, &st); err != nil {
		t.Fatal(err)
	}
	var topics []control.StreamStatus
	for _, s := range st.Streams {
		if s.Kind == "topic" {
			topics = append(topics, s)
		}
	}
	if len(st.Nodes) != 3 || st.Domain != "eu" || len(topics) != 1 || topics[0].Replicas != 3 {
		t.Fatalf("status = %+v; want 3 nodes in domain eu and one R3 topic", st)
	}

	// Drain: Close returns within its deadline and the survivors stay up.
	start := time.Now()
	cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer ccancel()
	if err := ds[0].Close(cctx); err != nil {
		t.Fatalf("drain n1: %v", err)
	}
	t.Logf("n1 drained in %s", time.Since(start).Round(time.Millisecond))
	nc2 := daemontest.Admin(t, trust, fmt.Sprintf("nats://127.0.0.1:%d", clientPorts[1]), nats.Timeout(2*time.Second))
	if _, err := nc2.Request("orders.order:HC-1", []byte("x"), 10*time.Second); err != nil {
		t.Fatalf("publish after draining one node: %v", err)
	}
}

// TestNodeModeRefusesToMintItsOwnTrust: a node without the installation's
// trust.json refuses to start instead of creating an operator nobody else
// trusts.
func TestNodeModeRefusesToMintItsOwnTrust(t *testing.T) {
	cfg := conf.DefaultConfig()
	cfg.Mode = conf.ModeNode
	cfg.DataDir = t.TempDir()
	cfg.HTTP.Listen = "off"
	cfg.Node.Port = natstest.FreePorts(t, 1)[0]
	cfg.Node.Durability.Replicas = 1
	cfg.Node.StoreDir = ""
	d := daemontest.NewConfig(t, &cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := d.Start(ctx)
	if !errors.Is(err, embeddednats.ErrNoTrust) || !strings.Contains(err.Error(), "platformd init") {
		t.Fatalf("start without trust: err = %v, want ErrNoTrust naming platformd init", err)
	}
}
