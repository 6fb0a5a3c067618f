package redrive

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog"
	"github.com/msgplatform/platform/platform/dlq"
)

// env is a fabric (one node unless newEnvNodes) with topics applied.
type env struct {
	t   *testing.T
	f   *natstest.Fabric
	js  jetstream.JetStream
	rec *catalog.Reconciler
}

func newEnv(t *testing.T, topics ...platform.TopicSpec) *env {
	t.Helper()
	return newEnvNodes(t, 1, topics...)
}

// newEnvNodes is newEnv on a fabric of nodes nodes.
func newEnvNodes(t *testing.T, nodes int, topics ...platform.TopicSpec) *env {
	t.Helper()
	f := natstest.RunFabric(t, nodes)
	js := f.JetStream()
	rec := catalog.NewReconciler(js, catalog.ReconcilerOptions{DefaultReplicas: nodes})
	ctx := natstest.Context(t, 30*time.Second)
	for _, ts := range topics {
		if ts.Replicas == 0 {
			ts.Replicas = 1
		}
		if _, err := rec.ApplyTopic(ctx, ts, catalog.ApplyOptions{}); err != nil {
			t.Fatalf("apply topic %s: %v", ts.Name, err)
		}
	}
	return &env{t: t, f: f, js: js, rec: rec}
}

func topic(name, owner, review string) platform.TopicSpec {
	ts := platform.DefaultTopicSpec(name)
	ts.Replicas, ts.Owner, ts.Review = 1, owner, review
	return ts
}

// service starts a service (fast timings) closed at the end of the test.
func (e *env) service(mod func(*Config)) *Service {
	e.t.Helper()
	return e.serviceOn(e.js, mod)
}

// serviceOn is service through js (a connection to a given node).
func (e *env) serviceOn(js jetstream.JetStream, mod func(*Config)) *Service {
	e.t.Helper()
	cfg := DefaultConfig()
	cfg.Checkpoint = 50 * time.Millisecond
	cfg.LeaseTTL = time.Second
	cfg.AdoptInterval = 200 * time.Millisecond
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(js, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := s.Start(natstest.Context(e.t, 10*time.Second)); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

// deadLetter publishes n events to topic and dead-letters each as the
// consumer runtime does (same subject, headers and id), with reason(i).
func (e *env) deadLetter(topic, consumer string, from, n int, reason func(i int) (dlq.ErrorClass, string)) []uint64 {
	e.t.Helper()
	ctx := natstest.Context(e.t, 60*time.Second)
	stream := platform.StreamName(topic)
	futs := make([]jetstream.PubAckFuture, 0, n)
	for i := from; i < from+n; i++ {
		m := &nats.Msg{Subject: platform.TopicSubject(topic, "order:"+strconv.Itoa(i)), Header: nats.Header{}, Data: []byte(fmt.Sprintf(`{"order":%d}`, i))}
		m.Header.Set(platform.HeaderTenant, "harbor-retail")
		f, err := e.js.PublishMsgAsync(m, jetstream.WithMsgID(fmt.Sprintf("evt-%s-%d", topic, i)))
		if err != nil {
			e.t.Fatal(err)
		}
		futs = append(futs, f)
	}
	seqs := awaitAcks(e.t, ctx, futs)
	s, err := e.js.Stream(ctx, stream)
	if err != nil {
		e.t.Fatal(err)
	}
	futs = futs[:0]
	for k, seq := range seqs {
		orig, err := s.GetMsg(ctx, seq)
		if err != nil {
			e.t.Fatal(err)
		}
		h := nats.Header{}
		for key, v := range orig.Header {
			if !strings.HasPrefix(key, "Nats-") {
				h[key] = v
			}
		}
		class, why := reason(from + k)
		now := time.Now().UTC().Format(time.RFC3339Nano)
		h.Set("Platform-Event-Id", orig.Header.Get(nats.MsgIdHdr))
		h.Set(dlq.HeaderReason, why)
		h.Set(dlq.HeaderClass, string(class))
		h.Set(dlq.HeaderAttempts, "5")
		h.Set(dlq.HeaderStream, stream)
		h.Set(dlq.HeaderSeq, strconv.FormatUint(seq, 10))
		h.Set(dlq.HeaderSubject, orig.Subject)
		h.Set(dlq.HeaderConsumer, consumer+"-p0")
		h.Set(dlq.HeaderGroup, consumer)
		h.Set(dlq.HeaderTenant, "harbor-retail")
		h.Set(dlq.HeaderFirstFailure, now)
		h.Set(dlq.HeaderLastFailure, now)
		m := &nats.Msg{Subject: platform.DLQSubject(stream, consumer+"-p0", seq), Header: h, Data: orig.Data}
		f, err := e.js.PublishMsgAsync(m)
		if err != nil {
			e.t.Fatal(err)
		}
		futs = append(futs, f)
	}
	return awaitAcks(e.t, ctx, futs)
}

// awaitAcks returns the stream sequences of futs, in order, failing the
// test if a publish is refused or ctx ends first.
func awaitAcks(t *testing.T, ctx context.Context, futs []jetstream.PubAckFuture) []uint64 {
	t.Helper()
	seqs := make([]uint64, 0, len(futs))
	for _, f := range futs {
		select {
		case ack := <-f.Ok():
			seqs = append(seqs, ack.Sequence)
		case err := <-f.Err():
			t.Fatal(err)
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	return seqs
}

func permanent(why string) func(int) (dlq.ErrorClass, string) {
	return func(i int) (dlq.ErrorClass, string) {
		return dlq.ClassPermanent, fmt.Sprintf(why, i)
	}
}

// redriven returns the events of request id stored on stream, in order.
// redrivenOnce is redriven, failing the test for each DLQ entry redriven
// more than once; it also returns the number of distinct entries.
func (e *env) redrivenOnce(stream, id string) ([]*jetstream.RawStreamMsg, int) {
	e.t.Helper()
	got := e.redriven(stream, id)
	seen := map[uint64]bool{}
	for _, m := range got {
		_, k, _ := RedriveOf(m.Header)
		if seen[k] {
			e.t.Errorf("DLQ entry %d redriven twice", k)
		}
		seen[k] = true
	}
	return got, len(seen)
}

// streamMsgs is the number of messages in stream.
func streamMsgs(t *testing.T, ctx context.Context, js jetstream.JetStream, stream string) uint64 {
	t.Helper()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func (e *env) redriven(stream, id string) []*jetstream.RawStreamMsg {
	e.t.Helper()
	var out []*jetstream.RawStreamMsg
	err := scan(natstest.Context(e.t, 30*time.Second), e.js, stream, 1, func(m *jetstream.RawStreamMsg) bool {
		if req, _, ok := RedriveOf(m.Header); ok && req == id {
			out = append(out, m)
		}
		return true
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// waitState waits until request id reaches state.
func waitState(t *testing.T, s *Service, id string, want State, timeout time.Duration) Status {
	t.Helper()
	var st Status
	natstest.WaitFor(t, timeout, func() error {
		var err error
		st, err = s.Get(context.Background(), id)
		if err != nil {
			return err
		}
		if st.State != want {
			return fmt.Errorf("redrive %s is %s (%s; next %d/%d), want %s", id, st.State, st.PauseReason, st.Progress.Next, st.Total, want)
		}
		return nil
	})
	return st
}

// ordersEnv is an env with topic orders (owner checkout) whose DLQ holds
// n entries of group email-notifier ("template <i> missing").
func ordersEnv(t *testing.T, n int) *env {
	t.Helper()
	e := newEnv(t, topic("orders", "checkout", ""))
	e.deadLetter("orders", "email-notifier", 0, n, permanent("template %d missing"))
	return e
}

// startRun submits r to s and runs it as its requester, failing the test
// if either is refused; it returns the submitted request.
func startRun(t *testing.T, ctx context.Context, s *Service, r Request) Status {
	t.Helper()
	st, err := s.Submit(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Run(ctx, st.ID, r.Requester, ""); err != nil {
		t.Fatal(err)
	}
	return st
}

func req(dlq, who string, sel Selection) Request {
	return Request{DLQ: dlq, Selection: sel, Reason: "fixed the card-number parser (INC-42)", Requester: who}
}
