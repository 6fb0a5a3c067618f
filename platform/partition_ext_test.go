package platform_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/embeddednats/natstest"
	"github.com/msgplatform/platform/platform"
	"github.com/msgplatform/platform/platform/catalog/catalogtest"
)

// Events published by a plain NATS client to <topic>.<key> are stored on
// the partition PartitionOf names, the same for every event of a key, in
// publish order per key.
func TestSameKeySamePartition(t *testing.T) {
	t.Parallel()
	spec := catalogtest.Topic("orders", 24)
	_, js := catalogtest.TopicFabric(t, 3, spec)
	ctx := natstest.Context(t, 60*time.Second)
	const keys, rounds = 500, 3
	var futures []jetstream.PubAckFuture
	for round := range rounds {
		for i := range keys {
			key := fmt.Sprintf("order:HC-%d", i)
			fut, err := js.PublishAsync(platform.TopicSubject("orders", key), []byte(strconv.Itoa(round)))
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
	stream, err := js.Stream(ctx, platform.StreamName("orders"))
	if err != nil {
		t.Fatal(err)
	}
	sinfo, err := stream.Info(ctx, jetstream.WithSubjectFilter("orders.>"))
	if err != nil {
		t.Fatal(err)
	}
	perPartition := map[int]int{}
	for subj, n := range sinfo.State.Subjects {
		_, p, ok := platform.KeyOf("orders", subj)
		if !ok {
			t.Fatalf("stream holds %s", subj)
		}
		perPartition[p] += int(n)
	}

	partitionOf := map[string]int{}
	lastRound := map[string]int{}
	total := 0
	for p := range spec.Partitions {
		c, err := js.CreateConsumer(ctx, platform.StreamName("orders"), jetstream.ConsumerConfig{
			FilterSubject:     platform.PartitionSubject("orders", p),
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
		for _, m := range natstest.FetchAll(t, c, n) {
			got++
			key, mp, ok := platform.KeyOf("orders", m.Subject())
			if !ok || mp != p {
				t.Fatalf("partition %d holds %s", p, m.Subject())
			}
			if want := platform.PartitionOf(key, spec.Partitions); want != p {
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
