package daemon_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/msgplatform/platform/internal/control"
	"github.com/msgplatform/platform/internal/daemon/daemontest"
)

// When Start returns, every node routes every control API endpoint, not
// only the service's PING (subscribed first): a platformctl connected to
// any node is never told "no responders" right after start. Checked in each node's account subscription list,
// which holds the routes' interest too, for each endpoint subject.
func TestStartReturnsWhenEveryNodeRoutesEveryEndpoint(t *testing.T) {
	d := daemontest.Start(t, 3)
	nc, err := nats.Connect(d.URL(), nats.UserCredentials(d.Creds()))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
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
