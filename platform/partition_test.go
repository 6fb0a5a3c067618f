package platform

import (
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
)

// PartitionOf must agree with the server's own transform code for every
// key and partition count.
func TestPartitionOfMatchesServerTransform(t *testing.T) {
	for _, n := range []int{1, 2, 7, 24, 48, 1024} {
		tr, err := server.NewSubjectTransform("orders.*", topicTransformDest("orders", n))
		if err != nil {
			t.Fatalf("server rejects transform for %d partitions: %v", n, err)
		}
		for i := range 2000 {
			key := fmt.Sprintf("order:HC-%d", i)
			want := StoredSubject("orders", key, n)
			if got := tr.TransformSubject(TopicSubject("orders", key)); got != want {
				t.Fatalf("n=%d key=%s: server stores %s, PartitionOf says %s", n, key, got, want)
			}
		}
	}
}

func TestPartitionSubjects(t *testing.T) {
	if got := TopicSubject("orders", "order:HC-2048"); got != "orders.order:HC-2048" {
		t.Errorf("TopicSubject = %s", got)
	}
	if got := PartitionSubject("orders.eu", 7); got != "orders.eu.7.*" {
		t.Errorf("PartitionSubject = %s", got)
	}
	key, p, ok := KeyOf("orders.eu", "orders.eu.7.order:1")
	if !ok || key != "order:1" || p != 7 {
		t.Errorf("KeyOf = %q %d %v", key, p, ok)
	}
	for _, s := range []string{"orders.7", "orders.x.k", "payments.1.k", "orders.1.a.b"} {
		if _, _, ok := KeyOf("orders", s); ok {
			t.Errorf("KeyOf(%q) ok, want not a stored subject", s)
		}
	}
	if PartitionOf("anything", 0) != 0 || PartitionOf("anything", 1) != 0 {
		t.Error("PartitionOf with < 2 partitions must be 0")
	}
}

func TestValidateKey(t *testing.T) {
	for _, k := range []string{"order:HC-2048", "c-1", "a*b", "ü"} {
		if err := ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%q) = %v", k, err)
		}
	}
	for _, k := range []string{"", "a.b", "*", ">", "a b", "a\tb", "a\x00"} {
		if err := ValidateKey(k); !errors.Is(err, ErrInvalidKey) {
			t.Errorf("ValidateKey(%q) = %v, want ErrInvalidKey", k, err)
		}
	}
}

// Events published by a plain NATS client to <topic>.<key> are stored on
// the partition PartitionOf names, the same for every event of a key, in
// publish order per key.
func TestSameKeySamePartition(t *testing.T) {
	t.Parallel()
	f := natstest.RunFabric(t, 3)
	r, _ := newTestReconciler(t, f)
	ctx := testCtx(t, 60*time.Second)
	spec := DefaultTopicSpec("orders")
	spec.Partitions = 24
	if _, err := r.ApplyTopic(ctx, spec, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	js := f.JetStream()
	const keys, rounds = 500, 3
	var futures []jetstream.PubAckFuture
	for round := range rounds {
		for i := range keys {
			key := fmt.Sprintf("order:HC-%d", i)
			fut, err := js.PublishAsync(TopicSubject("orders", key), []byte(strconv.Itoa(round)))
			if err != nil {
				t.Fatal(err)
			}
			futures = append(futures, fut)
		}
	}
	for _, fut := range futures {
		select {
		case <-fut.Ok():
		case err := <-fut.Err():
			t.Fatalf("publish %s: %v", fut.Msg().Subject, err)
		case <-ctx.Done():
			t.Fatal("publish acks timed out")
		}
	}

	// Count per partition from the stream leader: an R1 consumer may sit
	// on a follower that has not applied every acked publish yet, so its
	// NumPending can be short for a moment. fetchAll waits for the rest.
	stream, err := js.Stream(ctx, StreamName("orders"))
	if err != nil {
		t.Fatal(err)
	}
	sinfo, err := stream.Info(ctx, jetstream.WithSubjectFilter("orders.>"))
	if err != nil {
		t.Fatal(err)
	}
	perPartition := map[int]int{}
	for subj, n := range sinfo.State.Subjects {
		_, p, ok := KeyOf("orders", subj)
		if !ok {
			t.Fatalf("stream holds %s", subj)
		}
		perPartition[p] += int(n)
	}

	partitionOf := map[string]int{}
	lastRound := map[string]int{}
	total := 0
	for p := range spec.Partitions {
		c, err := js.CreateConsumer(ctx, StreamName("orders"), jetstream.ConsumerConfig{
			FilterSubject:     PartitionSubject("orders", p),
			AckPolicy:         jetstream.AckNonePolicy,
			MemoryStorage:     true,
			Replicas:          1,
			InactiveThreshold: time.Minute,
		})
		if err != nil {
			t.Fatal(err)
		}
		n := perPartition[p]
		if n == 0 {
			continue
		}
		got := 0
		for _, m := range fetchAll(t, c, n) {
			got++
			key, mp, ok := KeyOf("orders", m.Subject())
			if !ok || mp != p {
				t.Fatalf("partition %d holds %s", p, m.Subject())
			}
			if want := PartitionOf(key, spec.Partitions); want != p {
				t.Fatalf("key %s stored on partition %d, PartitionOf says %d", key, p, want)
			}
			if prev, seen := partitionOf[key]; seen && prev != p {
				t.Fatalf("key %s on partitions %d and %d", key, prev, p)
			}
			partitionOf[key] = p
			round, _ := strconv.Atoi(string(m.Data()))
			if prev, seen := lastRound[key]; seen && round != prev+1 {
				t.Fatalf("key %s: event %d after %d, order per key broken", key, round, prev)
			} else if !seen && round != 0 {
				t.Fatalf("key %s: first event is %d", key, round)
			}
			lastRound[key] = round
		}
		if got != n {
			t.Fatalf("partition %d: fetched %d of %d", p, got, n)
		}
		total += got
	}
	if total != keys*rounds || len(partitionOf) != keys {
		t.Fatalf("read %d events over %d keys, want %d over %d", total, len(partitionOf), keys*rounds, keys)
	}
	used := map[int]bool{}
	for _, p := range partitionOf {
		used[p] = true
	}
	if len(used) != spec.Partitions {
		t.Errorf("500 keys used %d of %d partitions", len(used), spec.Partitions)
	}
}

// fetchAll fetches n messages from c. A consumer that was just created
// may not take pull requests yet (no responders): retry that.
func fetchAll(t *testing.T, c jetstream.Consumer, n int, opts ...jetstream.FetchOpt) []jetstream.Msg {
	t.Helper()
	var out []jetstream.Msg
	natstest.WaitFor(t, 10*time.Second, func() error {
		batch, err := c.Fetch(n-len(out), append([]jetstream.FetchOpt{jetstream.FetchMaxWait(5 * time.Second)}, opts...)...)
		if err != nil {
			return err
		}
		for m := range batch.Messages() {
			out = append(out, m)
		}
		if err := batch.Error(); err != nil {
			return err
		}
		if len(out) < n {
			return fmt.Errorf("fetched %d of %d", len(out), n)
		}
		return nil
	})
	return out
}
