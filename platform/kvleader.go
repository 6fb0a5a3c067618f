package platform

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// LeaderReads returns kv with its reads served by the bucket stream's
// leader: the stream is switched to AllowDirect off first if it was on (a
// bucket created by nats.go has it on), and the bucket reopened, since
// nats.go picks direct or leader gets when it opens a bucket. It is
// reopened even when AllowDirect is already off: kv may have been opened
// while it was on (another platformd switched it since), and that handle
// would send direct gets nobody answers any more.
//
// For buckets whose next read must see the last write: a registry that
// reads a revision to write against, or a revocation list. A direct get
// is served by any replica, one that has not caught up included, and had
// no responders right after a bucket was created.
func LeaderReads(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValue) (jetstream.KeyValue, error) {
	s, err := js.Stream(ctx, "KV_"+kv.Bucket())
	if err != nil {
		return nil, err
	}
	if cfg := s.CachedInfo().Config; cfg.AllowDirect {
		cfg.AllowDirect = false
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			return nil, fmt.Errorf("leader reads: %w", err)
		}
	}
	return js.KeyValue(ctx, kv.Bucket())
}
