package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/platform/dlq"
)

// tracer records, per event, the steps of a chain in the order they ran.
type tracer struct {
	mu  sync.Mutex
	log map[string][]string
}

func (tr *tracer) add(m *Message, step string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.log[string(m.Data)] = append(tr.log[string(m.Data)], step)
}

func (tr *tracer) steps(event string) []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return slices.Clone(tr.log[event])
}

// middleware records name around next; for an event "bad" it turns the
// error coming up into Permanent.
func (tr *tracer) middleware(name string) Middleware {
	return func(next Handler) Handler {
		return func(ctx context.Context, m *Message) error {
			tr.add(m, name+">")
			err := next(ctx, m)
			tr.add(m, "<"+name)
			if err != nil && string(m.Data) == "bad" {
				return Permanent(err)
			}
			return err
		}
	}
}

func (tr *tracer) handler(ctx context.Context, m *Message) error {
	tr.add(m, "h")
	if string(m.Data) == "bad" {
		return errors.New("refused") // transient, made permanent by the middleware
	}
	return nil
}

// The config's middleware runs around the handler, the first outermost,
// for a group member and for queue workers alike, and the error it
// returns is the one settled: the handler's transient error made
// Permanent is dead-lettered on the first attempt.
func TestMiddlewareRunsInOrderAroundTheHandler(t *testing.T) {
	t.Parallel()
	f := natstest.RunFabric(t, 1)
	js := f.JetStream()
	ctx := natstest.Context(t, 60*time.Second)
	topic, q := platform.DefaultTopicSpec("mw-orders"), platform.DefaultQueueSpec("mw-jobs")
	topic.Partitions, topic.Replicas, q.Replicas = 1, 1, 1
	cat := platform.Catalog{
		Topics: map[string]platform.TopicSpec{"mw-orders": topic},
		Queues: map[string]platform.QueueSpec{"mw-jobs": q},
		Groups: map[string]platform.GroupSpec{"mw-group": {Name: "mw-group", Topic: "mw-orders"}},
	}
	if _, err := catalog.NewReconciler(js, catalog.ReconcilerOptions{}).Apply(ctx, cat, catalog.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}

	member, workers := &tracer{log: map[string][]string{}}, &tracer{log: map[string][]string{}}
	cfg := fastMember("mw-group", "mw-1")
	cfg.Middleware = []Middleware{member.middleware("a"), member.middleware("b")}
	startMember(t, js, cfg, member.handler)
	startWorkers(t, ctx, js, WorkersConfig{Queue: "mw-jobs", Middleware: []Middleware{workers.middleware("a"), workers.middleware("b")}},
		workers.handler)

	for _, data := range []string{"good", "bad"} {
		publishEvent(t, ctx, js, platform.Event{ID: data, Topic: "mw-orders", Key: "k", Payload: []byte(data)})
		publishJob(t, ctx, js, "mw-jobs."+data, []byte(data))
	}
	want := []string{"a>", "b>", "h", "<b", "<a"}
	for _, c := range []struct {
		name   string
		tr     *tracer
		object string
	}{{"member", member, "mw-orders"}, {"workers", workers, "mw-jobs"}} {
		natstest.WaitFor(t, 20*time.Second, func() error {
			es, err := dlq.Read(ctx, js, c.object)
			if err != nil || len(es) != 1 {
				return fmt.Errorf("%s: DLQ of %s: %d entries, %v", c.name, c.object, len(es), err)
			}
			if e := es[0]; e.Class != dlq.ClassPermanent || e.Attempts != 1 || string(e.Payload) != "bad" {
				return fmt.Errorf("%s: DLQ entry %+v, want bad, permanent, 1 attempt", c.name, e)
			}
			return nil
		})
		for _, event := range []string{"good", "bad"} {
			if got := c.tr.steps(event); !slices.Equal(got, want) {
				t.Errorf("%s, event %s: steps %s, want %s", c.name, event, strings.Join(got, " "), strings.Join(want, " "))
			}
		}
	}
}

func TestMiddlewareNilIsRefused(t *testing.T) {
	t.Parallel()
	h := func(context.Context, *Message) error { return nil }
	if _, err := NewMember(nil, MemberConfig{Group: "g", Middleware: []Middleware{nil}}, h); !errors.Is(err, platform.ErrInvalidSpec) {
		t.Errorf("member with a nil middleware: %v, want ErrInvalidSpec", err)
	}
	if _, err := NewWorkers(nil, WorkersConfig{Queue: "q", Middleware: []Middleware{nil}}, h); !errors.Is(err, platform.ErrInvalidSpec) {
		t.Errorf("workers with a nil middleware: %v, want ErrInvalidSpec", err)
	}
}
