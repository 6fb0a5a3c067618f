package canary

import (
	"strings"
	"testing"

	"github.com/msgplatform/platform/platform"
)

func TestCanaryKeysCoverEveryPartition(t *testing.T) {
	for n := 1; n <= platform.MaxPartitions; n++ {
		keys := Keys(n)
		if len(keys) != n {
			t.Fatalf("%d partitions: %d keys", n, len(keys))
		}
		for p, k := range keys {
			if got := platform.PartitionOf(k, n); got != p {
				t.Fatalf("%d partitions: key %q maps to %d, want %d", n, k, got, p)
			}
			if err := platform.ValidateKey(k); err != nil || !strings.HasPrefix(k, keyPrefix) {
				t.Fatalf("%d partitions: key %q: %v", n, k, err)
			}
		}
	}
	if Key(24, 7) != Keys(24)[7] {
		t.Fatal("Key disagrees with Keys")
	}
}
