package platform

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
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
