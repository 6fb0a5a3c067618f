package daemon_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/msgplatform/platform/embeddednats"
	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/daemon/daemontest"
	"github.com/msgplatform/platform/platform"
)

// When Start returns, every node routes every control API endpoint, not
// only the service's PING (subscribed first): a platformctl connected to
// any node is never told "no responders" right after start. Checked in each node's account subscription list,
// which holds the routes' interest too, for each endpoint subject.
func TestStartReturnsWhenEveryNodeRoutesEveryEndpoint(t *testing.T) {
	d := daemontest.Start(t, 3)
	nc, _ := natstest.Connect(t, d.URL(), nats.UserCredentials(d.Creds()))
	msg, err := nc.Request("$SRV.INFO."+control.ServiceName, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var info micro.Info
	if err := json.Unmarshal(msg.Data, &info); err != nil {
		t.Fatal(err)
	}
	if len(info.Endpoints) < 20 {
		t.Fatalf("control service lists %d endpoints", len(info.Endpoints))
	}
	acc := d.Trust().AdminAccount()
	missing := 0
	for _, n := range d.Nodes() {
		for _, ep := range info.Endpoints {
			a, err := n.Server().LookupAccount(acc)
			if err != nil {
				t.Fatal(err)
			}
			if a.Interest(ep.Subject) == 0 {
				missing++
				t.Errorf("%s does not route endpoint %s (%s)", n.Name(), ep.Name, ep.Subject)
			}
		}
	}
	t.Logf("%d nodes x %d endpoints checked, %d not routed", len(d.Nodes()), len(info.Endpoints), missing)
}

// platformd starts its daemon with a context that has no deadline (it ends
// on a signal only). Start must return with that too: the readiness probe
// once flushed with FlushWithContext, which refuses a context without a
// deadline, and every platformd in Docker exited with "context requires a
// deadline" while every test, whose contexts all have one, passed.
func TestStartWithoutDeadline(t *testing.T) {
	trust, err := embeddednats.NewTrust()
	if err != nil {
		t.Fatal(err)
	}
	port := natstest.FreePorts(t, 1)[0]
	cfg := daemontest.NodeRegionConfig(t, trust, "solo", port, platform.Catalog{}, nil)
	d := daemontest.NewConfig(t, cfg)
	if !cfg.Control.Enabled {
		t.Fatal("the control API is off by default; this test needs it on")
	}
	done := make(chan error, 1)
	go func() { done <- d.Start(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Start with a context without deadline: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Start with a context without deadline has not returned in 60 s")
	}
}
