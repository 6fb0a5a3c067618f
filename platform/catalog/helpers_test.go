package catalog

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/platform"
)

// harborCart is the reference workload's catalog (a smaller retention to
// keep tests honest about units, same shape).
func harborCart() platform.Catalog {
	orders := platform.DefaultTopicSpec("orders")
	orders.Partitions = 24
	orders.Key = "order:<orderId>"
	orders.Owner = "checkout"
	jobs := platform.DefaultQueueSpec("shipment-jobs")
	jobs.Owner = "fulfilment"
	return platform.Catalog{
		Topics: map[string]platform.TopicSpec{"orders": orders},
		Queues: map[string]platform.QueueSpec{"shipment-jobs": jobs},
		Groups: map[string]platform.GroupSpec{
			"email-notifier":  {Name: "email-notifier", Topic: "orders"},
			"sales-analytics": {Name: "sales-analytics", Topic: "orders"},
			"fraud-monitor":   {Name: "fraud-monitor", Topic: "orders"},
		},
	}
}

// clone deep-copies a catalog so a test can change one object.
func clone(c platform.Catalog) platform.Catalog {
	out := platform.Catalog{Topics: map[string]platform.TopicSpec{}, Queues: map[string]platform.QueueSpec{}, Groups: map[string]platform.GroupSpec{}}
	for k, v := range c.Topics {
		out.Topics[k] = v
	}
	for k, v := range c.Queues {
		out.Queues[k] = v
	}
	for k, v := range c.Groups {
		out.Groups[k] = v
	}
	return out
}

// apiRecorder records the JetStream API subjects a JetStream context
// requests.
type apiRecorder struct {
	mu   sync.Mutex
	subs []string
}

func (a *apiRecorder) reset() {
	a.mu.Lock()
	a.subs = nil
	a.mu.Unlock()
}

// writes returns the recorded requests that change state.
func (a *apiRecorder) writes() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, s := range a.subs {
		for _, w := range []string{".CREATE.", ".UPDATE.", ".DELETE.", ".DURABLE.CREATE."} {
			if strings.Contains(s, w) {
				out = append(out, s)
				break
			}
		}
	}
	return out
}

// onFabric starts a fabric of nodes nodes and returns a reconciler on it
// that records its API requests (newTestReconciler), a plain JetStream
// and a context ending after 60 s or with the test.
func onFabric(t *testing.T, nodes int) (*Reconciler, *apiRecorder, jetstream.JetStream, context.Context) {
	t.Helper()
	f := natstest.RunFabric(t, nodes)
	r, rec := newTestReconciler(t, f)
	return r, rec, f.JetStream(), natstest.Context(t, 60*time.Second)
}

// newTestReconciler returns a reconciler on the fabric whose API requests
// are recorded.
func newTestReconciler(t testing.TB, f *natstest.Fabric) (*Reconciler, *apiRecorder) {
	t.Helper()
	rec := &apiRecorder{}
	js, err := jetstream.New(f.Conn(), jetstream.WithClientTrace(&jetstream.ClientTrace{
		RequestSent: func(subj string, _ []byte) {
			rec.mu.Lock()
			rec.subs = append(rec.subs, subj)
			rec.mu.Unlock()
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	return NewReconciler(js, ReconcilerOptions{Logger: natstest.Logger(t)}), rec
}

// applyWant applies cat with r and returns its changes, failing the test
// if the apply fails and reporting, under what, each change whose action
// is not want.
func applyWant(t *testing.T, ctx context.Context, r *Reconciler, cat platform.Catalog, want Action, what string) []Change {
	t.Helper()
	changes, err := r.Apply(ctx, cat, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range changes {
		if c.Action != want {
			t.Errorf("%s: %s, want %s", what, c, want)
		}
	}
	return changes
}

func actions(changes []Change) map[string]Action {
	out := map[string]Action{}
	for _, c := range changes {
		out[string(c.Kind)+" "+c.Name] = c.Action
	}
	return out
}
