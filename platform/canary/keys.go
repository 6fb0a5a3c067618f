package canary

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/msgplatform/platform/platform"
)

// keyPrefix starts every canary key: "_canary-<n>". The leading
// '_' keeps it apart from business keys (on a compacted topic a shared
// key would overwrite the business value).
const keyPrefix = "_canary-"

// queueToken is the last subject token of a queue's canary jobs.
const queueToken = "_canary"

var keyCache sync.Map // partitions -> []string

// Keys returns, for a topic with that many partitions, the key of
// each partition's canary: keys[p] is the first of _canary-0, _canary-1,
// ... that platform.PartitionOf maps to p. Deterministic, so every platformd picks
// the same keys.
func Keys(partitions int) []string {
	if partitions < 1 {
		partitions = 1
	}
	if v, ok := keyCache.Load(partitions); ok {
		return v.([]string)
	}
	keys := make([]string, partitions)
	left := partitions
	for n := 0; left > 0; n++ {
		k := keyPrefix + strconv.Itoa(n)
		if p := platform.PartitionOf(k, partitions); keys[p] == "" {
			keys[p] = k
			left--
		}
	}
	v, _ := keyCache.LoadOrStore(partitions, keys)
	return v.([]string)
}

// Key returns the key of partition p's canary (see Keys).
func Key(partitions, p int) string { return Keys(partitions)[p] }

// topicID is the Nats-Msg-Id of a topic canary for one slot.
func topicID(topic string, p int, slot time.Time) string {
	return fmt.Sprintf("canary:%s:%d:%d", topic, p, slot.UnixNano())
}

// queueID is the Nats-Msg-Id of a queue canary for one slot.
func queueID(queue string, slot time.Time) string {
	return fmt.Sprintf("canary:%s:%d", queue, slot.UnixNano())
}

// slotOf reads the slot time back from a canary's Nats-Msg-Id (its
// last ':'-separated field).
func slotOf(id string) (time.Time, bool) {
	if !strings.HasPrefix(id, "canary:") {
		return time.Time{}, false
	}
	ns, err := strconv.ParseInt(id[strings.LastIndexByte(id, ':')+1:], 10, 64)
	if err != nil || ns <= 0 {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}
