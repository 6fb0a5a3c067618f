package platform

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"unicode"
)

// A topic is addressed as <topic>.<key>. Its stream's subject transform
// stores each event as <topic>.<partition>.<key>, where partition is
// computed by the server with the mapping function partition(N,1): FNV-1a
// (32 bit) of the key token, modulo N. PartitionOf computes the same value
// on the client.

// PartitionOf returns the partition (0..partitions-1) the server stores key
// on for a topic with that many partitions. It matches nats-server's
// partition(N,1) mapping exactly: fnv32a(key) mod N. A partition count
// below 1 yields 0, as on the server.
func PartitionOf(key string, partitions int) int {
	if partitions < 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(partitions))
}

// TopicSubject is the subject a producer publishes an event with key to,
// e.g. TopicSubject("orders", "order:HC-2048") = "orders.order:HC-2048".
// key must satisfy ValidateKey.
func TopicSubject(topic, key string) string {
	return topic + "." + key
}

// PartitionSubject is the filter selecting every stored event of one
// partition, e.g. PartitionSubject("orders", 7) = "orders.7.*".
func PartitionSubject(topic string, p int) string {
	return topic + "." + strconv.Itoa(p) + ".*"
}

// StoredSubject is the subject an event published to TopicSubject(topic,
// key) is stored under: "<topic>.<partition>.<key>".
func StoredSubject(topic, key string, partitions int) string {
	return topic + "." + strconv.Itoa(PartitionOf(key, partitions)) + "." + key
}

// KeyOf returns the key of a stored subject "<topic>.<partition>.<key>"
// and its partition; ok is false if subject is not one of topic's.
func KeyOf(topic, subject string) (key string, partition int, ok bool) {
	rest, found := strings.CutPrefix(subject, topic+".")
	if !found {
		return "", 0, false
	}
	ps, key, found := strings.Cut(rest, ".")
	if !found || key == "" || strings.Contains(key, ".") {
		return "", 0, false
	}
	p, err := strconv.Atoi(ps)
	if err != nil || p < 0 {
		return "", 0, false
	}
	return key, p, true
}

// ValidateKey reports whether key can address a topic: one subject token,
// so no '.', no wildcard ('*', '>'), no whitespace or control characters,
// not empty.
func ValidateKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	}
	if key == "*" || key == ">" {
		return fmt.Errorf("%w: %q is a wildcard", ErrInvalidKey, key)
	}
	for _, r := range key {
		switch {
		case r == '.':
			return fmt.Errorf("%w: %q contains '.' (a key is one subject token)", ErrInvalidKey, key)
		case unicode.IsSpace(r) || unicode.IsControl(r):
			return fmt.Errorf("%w: %q contains whitespace or a control character", ErrInvalidKey, key)
		}
	}
	return nil
}

// topicTransformDest is the destination of a topic stream's subject
// transform: <topic>.{{partition(N,1)}}.{{wildcard(1)}}.
func topicTransformDest(topic string, partitions int) string {
	return fmt.Sprintf("%s.{{partition(%d,1)}}.{{wildcard(1)}}", topic, partitions)
}
