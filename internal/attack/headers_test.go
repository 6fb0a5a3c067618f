package attack_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/internal/attack"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/dlq"
	"github.com/msgplatform/platform/tenancy"
)

// Class 1: platform headers belong to the platform. A tenant user sets
// headers of the platform's namespace on every publish path it has; what
// is stored carries none of them (Platform-Tenant is the real tenant), so
// no group skips the event as a canary or as another group's redrive, and
// the inbox keys on the event's own id. The client's own headers are kept.
func TestAttackForgedPlatformHeaders(t *testing.T) {
	r := newRig(t, 1)
	r.mustCtl("tenant", "create", "harbor-retail")
	r.mustCtl("tenant", "create", "meridian")
	r.mustCtl("tenant", "topic", "harbor-retail", "orders", "--partitions", "2")
	prod := r.user("harbor-retail", "producer", []string{"orders"}, nil)
	nc := r.connect(prod, "producer")
	js := natstest.JetStream(t, nc)
	forged := map[string]string{
		platform.CanaryHeader:         "true",
		platform.HeaderRedriveGroup:   "fraud-monitor",
		platform.OriginalMsgIDHeader:  "evt-someone-elses",
		dlq.HeaderReason:              "forged",
		platform.HeaderTenant:         "meridian",
		"Platform-Not-Yet-Invented":   "x",
		"Platform-Redrive-Dlq-Seq":    "1",
		"Platform-Dlq-Attempts":       "99",
		"Platform-Event-Id":           "evt-forged",
		"Platform-Redrive-Request":    "rq-forged",
		"Platform-Dlq-First-Failure":  "2026-01-01T00:00:00Z",
		"Platform-Tenant-Override-Me": "meridian",
	}
	header := func(keyCase func(string) string) nats.Header {
		h := nats.Header{"X-Order": []string{"HC-1"}, "Event-Type": []string{"OrderPlaced"}}
		for k, v := range forged {
			h[keyCase(k)] = []string{v} // as written, not canonicalized
		}
		return h
	}
	asIs := func(k string) string { return k }
	cliHeaders := func() []string {
		var args []string
		for k, v := range forged {
			args = append(args, "-H", k+":"+v)
		}
		return append(args, "-H", "X-Order:HC-1", "-H", "Event-Type:OrderPlaced")
	}

	type route struct {
		name string
		send func(id string) error
	}
	routes := []route{
		{"header-core-cli", func(id string) error {
			out, err := r.natsCLI(prod, "producer", append([]string{"pub", "orders.k1", id}, cliHeaders()...)...)
			return wrap(err, out)
		}},
		{"header-jetstream-cli", func(id string) error {
			out, err := r.natsCLI(prod, "producer", append([]string{"pub", "--jetstream", "orders.k1", id}, cliHeaders()...)...)
			return wrap(err, out)
		}},
		{"header-request-cli", func(id string) error {
			out, err := r.natsCLI(prod, "producer", append([]string{"req", "orders.k1", id}, cliHeaders()...)...)
			return wrap(err, out)
		}},
		{"header-jetstream-lowercase", func(id string) error {
			_, err := js.PublishMsg(ctxT(t), &nats.Msg{Subject: "orders.k2", Data: []byte(id), Header: header(strings.ToLower)})
			return err
		}},
		{"header-jetstream-uppercase", func(id string) error {
			_, err := js.PublishMsg(ctxT(t), &nats.Msg{Subject: "orders.k2", Data: []byte(id), Header: header(strings.ToUpper)})
			return err
		}},
		{"header-core-leading-space", func(id string) error {
			return nc.PublishMsg(&nats.Msg{Subject: "orders.k3", Data: []byte(id), Header: header(func(k string) string { return " " + k })})
		}},
		{"header-core-repeated", func(id string) error {
			h := header(asIs)
			h[platform.CanaryHeader] = []string{"false", "true", "true"}
			return nc.PublishMsg(&nats.Msg{Subject: "orders.k3", Data: []byte(id), Header: h})
		}},
		{"header-fast-batch", func(id string) error {
			// A fast-batch publish names its batch in the reply subject
			// (<inbox>.<uuid>.<flow>.<gap>.<seq>.<op>.$FI).
			reply := tenancy.InboxPrefix("producer") + ".fb" + id + ".1.ok.1.0.$FI"
			return nc.PublishMsg(&nats.Msg{Subject: "orders.k4", Reply: reply, Data: []byte(id), Header: header(asIs)})
		}},
		{"header-atomic-batch", func(id string) error {
			h := header(asIs)
			h.Set("Nats-Batch-Id", "b"+id)
			h.Set("Nats-Batch-Sequence", "1")
			h.Set("Nats-Batch-Commit", "1")
			_, err := nc.RequestMsg(&nats.Msg{Subject: "orders.k4", Data: []byte(id), Header: h}, 3*time.Second)
			return err
		}},
	}
	for i, rt := range routes {
		t.Run(rt.name, func(t *testing.T) {
			id := fmt.Sprintf("forged-%d", i)
			before := r.msgs("harbor-retail", "orders")
			if err := rt.send(id); err != nil {
				t.Logf("send: %v (a refusal is fine: nothing forged may be stored)", err)
			}
			_ = nc.Flush()
			var got *nats.RawStreamMsg
			eventually(5*time.Second, func() bool {
				for _, m := range r.stored("harbor-retail", "orders") {
					if string(m.Data) == id {
						got = m
						return true
					}
				}
				return false
			})
			if got == nil {
				// Refused by the store (the batch routes on a stream that
				// allows no batches): nothing stored, nothing forged.
				if n := r.msgs("harbor-retail", "orders"); n != before {
					t.Fatalf("event not found but the stream went from %d to %d events", before, n)
				}
				attack.Refused(t, rt.name)
				return
			}
			for k, vs := range got.Header {
				if platform.IsPlatformHeader(strings.TrimSpace(k)) && k != platform.HeaderTenant {
					t.Errorf("stored event keeps the forged header %q: %q", k, vs)
				}
			}
			if v := got.Header.Values(platform.HeaderTenant); len(v) != 1 || v[0] != "harbor-retail" {
				t.Errorf("Platform-Tenant = %q, want exactly [harbor-retail]", v)
			}
			if platform.IsCanary(got.Header) {
				t.Error("stored event passes for a canary: every group would skip it")
			}
			if g := got.Header.Get(platform.HeaderRedriveGroup); g != "" {
				t.Errorf("stored event names redrive group %q: other groups would skip it", g)
			}
			if got.Header.Get("X-Order") != "HC-1" || got.Header.Get("Event-Type") != "OrderPlaced" {
				t.Errorf("the client's own headers were not kept: %v", got.Header)
			}
			if n := r.msgs("harbor-retail", "orders"); n != before+1 {
				t.Errorf("stream went from %d to %d events, want one more", before, n)
			}
			attack.Refused(t, rt.name)
		})
	}
}

func wrap(err error, out string) error {
	if err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(out))
	}
	return nil
}
