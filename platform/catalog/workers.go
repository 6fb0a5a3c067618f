package catalog

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/kvutil"
	"github.com/msgplatform/platform/platform"
)

// queueWorkers reads the sessions of queue's Workers instances, by ID.
func queueWorkers(ctx context.Context, js jetstream.JetStream, queue string, now time.Time) ([]platform.WorkerSession, error) {
	kv, err := kvutil.Lookup(ctx, js, platform.WorkerSessionsBucket)
	if kv == nil || err != nil {
		return nil, err
	}
	prefix := platform.StreamName(queue) + "."
	entries, _, err := platform.ReadSessionRecords(ctx, kv, prefix)
	if err != nil {
		return nil, err
	}
	var out []platform.WorkerSession
	for _, e := range entries {
		var rec platform.SessionRecord
		_ = json.Unmarshal(e.Value(), &rec)
		silent, ttl := max(now.Sub(e.Created()), 0), rec.TTL
		if ttl <= 0 {
			ttl = platform.DefaultSessionTTL
		}
		out = append(out, platform.WorkerSession{ID: strings.TrimPrefix(e.Key(), prefix), Jobs: len(rec.Jobs), Silent: silent, Lost: silent > ttl})
	}
	slices.SortFunc(out, func(a, b platform.WorkerSession) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}
