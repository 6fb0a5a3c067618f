package schema_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/platform/schema"
)

const (
	orderV1 = `{"type":"object","properties":{"orderId":{"type":"string"},"total":{"type":"number"}},"required":["orderId","total"]}`
	orderV2 = `{"type":"object","properties":{"orderId":{"type":"string"},"total":{"type":"number"},"customerId":{"type":"string"}},"required":["orderId","total","customerId"]}`
	orderV3 = `{"title":"OrderPlaced v3","type":"object","properties":{"orderId":{"type":"string"},"total":{"type":"number"}},"required":["orderId","total"]}`
)

// TestRegistryReplicated runs the registry on a 3-node fabric: the bucket
// is R3, versions are immutable and numbered 1..n, the guide's v2 -> v3
// change is refused under full with the rule it breaks, and concurrent
// registrations never share a version number.
func TestRegistryReplicated(t *testing.T) {
	f := natstest.RunFabric(t, 3)
	js := f.JetStream()
	reg, err := schema.New(js, schema.Config{Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	r1, err := reg.Register(ctx, "OrderPlaced", []byte(orderV1), schema.RegisterOptions{})
	if err != nil || r1.Version.Version != 1 || r1.Mode != schema.ModeBackward {
		t.Fatalf("v1: %+v, %v", r1, err)
	}
	info, err := js.Stream(ctx, "KV_"+schema.DefaultBucket)
	if err != nil || info.CachedInfo().Config.Replicas != 3 {
		t.Fatalf("bucket stream: %v (want R3)", err)
	}
	// backward: v2 adds a required field: refused with the rule.
	_, err = reg.Register(ctx, "OrderPlaced", []byte(orderV2), schema.RegisterOptions{})
	var inc *schema.IncompatibleError
	if !errors.As(err, &inc) || !errors.Is(err, schema.ErrIncompatible) ||
		!strings.Contains(err.Error(), `backward: field "customerId" became required in v2; data written with v1 may lack it`) {
		t.Fatalf("v2 under backward: %v", err)
	}
	// Check says the same without writing.
	cr, err := reg.Check(ctx, "OrderPlaced", []byte(orderV2), "")
	if err != nil || cr.Compatible || cr.Version != 2 || len(cr.Violations) == 0 {
		t.Fatalf("check: %+v, %v", cr, err)
	}
	if cr, _ := reg.Check(ctx, "OrderPlaced", []byte(orderV2), schema.ModeForward); !cr.Compatible {
		t.Fatalf("check under forward: %+v", cr)
	}
	// Registered under forward (old readers of an open model accept it).
	r2, err := reg.Register(ctx, "OrderPlaced", []byte(orderV2), schema.RegisterOptions{Mode: schema.ModeForward})
	if err != nil || r2.Version.Version != 2 || r2.Mode != schema.ModeForward {
		t.Fatalf("v2 under forward: %+v, %v", r2, err)
	}
	// The guide's case: v3 removes customerId, which v2 consumers require.
	if _, err := reg.SetMode(ctx, "OrderPlaced", schema.ModeFull); err != nil {
		t.Fatal(err)
	}
	_, err = reg.Register(ctx, "OrderPlaced", []byte(orderV3), schema.RegisterOptions{})
	if !errors.Is(err, schema.ErrIncompatible) || !strings.Contains(err.Error(), `forward: field "customerId" is required by v2 but not by v3`) {
		t.Fatalf("v3 under full: %v", err)
	}
	r3, err := reg.Register(ctx, "OrderPlaced", []byte(orderV3), schema.RegisterOptions{Mode: schema.ModeBackward})
	if err != nil || r3.Version.Version != 3 {
		t.Fatalf("v3 under backward: %+v, %v", r3, err)
	}
	// Re-registering a known schema (canonically equal) returns its
	// version and writes nothing.
	again, err := reg.Register(ctx, "OrderPlaced", []byte(" "+orderV2+"\n"), schema.RegisterOptions{})
	if err != nil || !again.Existing || again.Version.Version != 2 {
		t.Fatalf("idempotent register: %+v, %v", again, err)
	}
	v2, err := reg.Get(ctx, "OrderPlaced", 2)
	if err != nil || !strings.Contains(string(v2.Schema), "customerId") || v2.Mode != schema.ModeForward {
		t.Fatalf("get v2: %+v, %v", v2, err)
	}
	if _, err := reg.Get(ctx, "OrderPlaced", 9); !errors.Is(err, schema.ErrNotFound) {
		t.Fatalf("get v9: %v", err)
	}
	if _, err := reg.Get(ctx, "Nope", 0); !errors.Is(err, schema.ErrNotFound) {
		t.Fatalf("get Nope: %v", err)
	}
	if _, err := reg.Register(ctx, "OrderPlaced", []byte(`{"type":"strin"}`), schema.RegisterOptions{}); !errors.Is(err, schema.ErrInvalid) {
		t.Fatalf("bad schema: %v", err)
	}

	// Concurrent registrations (mode none, all different): each gets its
	// own version, none is lost.
	const n = 8
	if _, err := reg.SetMode(ctx, "Race", schema.ModeNone); err != nil {
		t.Fatal(err)
	}
	regs := make([]*schema.Registry, n) // separate clients, no shared lock
	for i := range regs {
		nc := f.NodeConn(i % 3)
		js2, _ := natsJS(t, nc)
		regs[i], _ = schema.New(js2, schema.Config{Replicas: 3, Retries: 50})
	}
	var wg sync.WaitGroup
	got := make([]int, n)
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			s := fmt.Sprintf(`{"type":"object","properties":{"f%d":{"type":"string"}}}`, i)
			r, err := regs[i].Register(ctx, "Race", []byte(s), schema.RegisterOptions{})
			got[i], errs[i] = r.Version.Version, err
		}(i)
	}
	wg.Wait()
	seen := map[int]bool{}
	for i := range got {
		if errs[i] != nil {
			t.Fatalf("racer %d: %v", i, errs[i])
		}
		if seen[got[i]] {
			t.Fatalf("two registrations became v%d: %v", got[i], got)
		}
		seen[got[i]] = true
	}
	race, err := reg.Subject(ctx, "Race")
	if err != nil || len(race.Versions) != n {
		t.Fatalf("race subject: %d versions, %v", len(race.Versions), err)
	}
	for i, v := range race.Versions {
		var doc map[string]any
		if v.Version != i+1 || json.Unmarshal(v.Schema, &doc) != nil {
			t.Fatalf("version %d stored as %d", i+1, v.Version)
		}
	}
	list, err := reg.List(ctx)
	if err != nil || len(list) != 2 || list[0].Subject != "OrderPlaced" || list[0].Latest != 3 || list[1].Versions != n {
		t.Fatalf("list: %+v, %v", list, err)
	}

	// The registry survives the loss of a node (R3).
	f.Kill(0)
	nc := f.NodeConn(1)
	js1, _ := natsJS(t, nc)
	reg1, _ := schema.New(js1, schema.Config{Replicas: 3})
	natstest.WaitFor(t, 20*time.Second, func() error {
		actx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := reg1.Get(actx, "OrderPlaced", 3)
		return err
	})
}

// TestValidatingPublisher: a Publisher with a Validator refuses an event
// that does not conform (not stored), stamps the version on one that
// does, leaves unbound topics alone; the consumer reads the version and
// decodes with encoding/json, which ignores fields it does not know.
func TestValidatingPublisher(t *testing.T) {
	var topics []platform.TopicSpec
	for _, name := range []string{"orders", "audit"} {
		spec := platform.DefaultTopicSpec(name)
		spec.Partitions, spec.Replicas, spec.Owner = 1, 1, "test"
		topics = append(topics, spec)
	}
	js, reg, ctx := orderRegistry(t, topics...)
	val := startValidator(t, ctx, reg.NewValidator(map[string]string{"orders": "OrderPlaced"}))
	pub := platform.NewPublisher(js, platform.PublisherOptions{Validator: val})

	_, err := pub.Publish(ctx, platform.Event{ID: "bad-1", Topic: "orders", Key: "o1", Payload: []byte(`{"orderId":"o1","total":"12"}`)})
	if !errors.Is(err, platform.ErrInvalidEvent) || !errors.Is(err, schema.ErrValidation) || !strings.Contains(err.Error(), "/total") {
		t.Fatalf("invalid event: %v", err)
	}
	// v2 registered after the validator started: the watch picks it up.
	if _, err := reg.Register(ctx, "OrderPlaced", []byte(orderV2), schema.RegisterOptions{Mode: schema.ModeForward}); err != nil {
		t.Fatal(err)
	}
	good := []byte(`{"orderId":"o1","total":12.5,"customerId":"c9","giftWrap":true}`)
	natstest.WaitFor(t, 5*time.Second, func() error {
		v, err := val.Validate("orders", &platform.Event{Payload: good})
		if v != 2 {
			return fmt.Errorf("validated as v%d: %v", v, err)
		}
		return nil
	})
	if _, err := pub.Publish(ctx, platform.Event{ID: "ok-1", Topic: "orders", Key: "o1", Payload: good}); err != nil {
		t.Fatal(err)
	}
	// An old producer pins v1 (its payload lacks customerId).
	pinned := platform.Event{ID: "ok-2", Topic: "orders", Key: "o2", Payload: []byte(`{"orderId":"o2","total":3}`),
		Headers: nats.Header{platform.SchemaVersionHeader: []string{"1"}}}
	if _, err := pub.Publish(ctx, pinned); err != nil {
		t.Fatal(err)
	}
	// Unbound topic: not validated, not stamped.
	if _, err := pub.Publish(ctx, platform.Event{ID: "a-1", Topic: "audit", Key: "k", Payload: []byte("not json")}); err != nil {
		t.Fatal(err)
	}
	if st := pub.Stats(); st.OK != 3 {
		t.Fatalf("stats: %+v (the refused event must not be sent)", st)
	}

	// Consumer side: the version chooses the decoder; a v1 decoder reads
	// v2 data because encoding/json ignores unknown fields.
	type orderV1Struct struct {
		OrderID string  `json:"orderId"`
		Total   float64 `json:"total"`
	}
	stream, _ := js.Stream(ctx, platform.StreamName("orders"))
	for seq, want := range map[uint64]int{1: 2, 2: 1} {
		m, err := stream.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		v, ok := schema.VersionOf(m.Header)
		if !ok || v != want {
			t.Fatalf("seq %d: version %d %v, want %d", seq, v, ok, want)
		}
		var o orderV1Struct
		if err := json.Unmarshal(m.Data, &o); err != nil || o.OrderID == "" {
			t.Fatalf("seq %d: v1 decoder on v%d data: %+v, %v", seq, v, o, err)
		}
	}
	audit, _ := js.Stream(ctx, platform.StreamName("audit"))
	m, err := audit.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := schema.VersionOf(m.Header); ok {
		t.Fatal("unbound topic stamped")
	}
}

// orderRegistry starts a one-node fabric, applies topics and registers
// OrderPlaced v1 (orderV1) in a registry of the default config; the
// context ends after 30 s or with the test.
func orderRegistry(t *testing.T, topics ...platform.TopicSpec) (jetstream.JetStream, *schema.Registry, context.Context) {
	t.Helper()
	js := natstest.RunFabric(t, 1).JetStream()
	ctx := natstest.Context(t, 30*time.Second)
	cat := platform.Catalog{Topics: map[string]platform.TopicSpec{}}
	for _, ts := range topics {
		cat.Topics[ts.Name] = ts
	}
	if _, err := catalog.NewReconciler(js, catalog.ReconcilerOptions{DefaultReplicas: 1}).Apply(ctx, cat, catalog.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	reg, err := schema.New(js, schema.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Register(ctx, "OrderPlaced", []byte(orderV1), schema.RegisterOptions{}); err != nil {
		t.Fatal(err)
	}
	return js, reg, ctx
}

// startValidator starts v, failing the test if it cannot; v is closed
// when the test ends.
func startValidator(t *testing.T, ctx context.Context, v *schema.Validator) *schema.Validator {
	t.Helper()
	if err := v.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v.Close() })
	return v
}

func natsJS(t *testing.T, nc *nats.Conn) (jetstream.JetStream, error) {
	t.Helper()
	return natstest.JetStream(t, nc), nil
}
