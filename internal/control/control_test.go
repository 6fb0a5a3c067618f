package control_test

import (
	"context"
	"testing"
	"time"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/control"
)

// An endpoint's own Timeout replaces Serve's for its requests only.
func TestEndpointTimeout(t *testing.T) {
	f := natstest.RunFabric(t, 1)
	nc := f.Conn()
	left := func(ctx context.Context, _ struct{}) (time.Duration, error) {
		d, _ := ctx.Deadline()
		return time.Until(d), nil
	}
	svc, err := control.Serve(nc, []control.Endpoint{
		{Name: "usual", Subject: "t.usual", Handle: control.JSON(left)},
		{Name: "long", Subject: "t.long", Handle: control.JSON(left), Timeout: time.Minute},
	}, nil, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var usual, long time.Duration
	if err := control.Call(ctx, nc, "t.usual", nil, &usual); err != nil {
		t.Fatal(err)
	}
	if err := control.Call(ctx, nc, "t.long", nil, &long); err != nil {
		t.Fatal(err)
	}
	if usual > time.Second || long < 50*time.Second {
		t.Fatalf("request deadlines: usual endpoint %s (want <= 1s), long endpoint %s (want about 1m)", usual, long)
	}
}
