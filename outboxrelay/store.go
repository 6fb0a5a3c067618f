package outboxrelay

import (
	"context"
	"time"
)

// Store is an outbox the relay reads. Enqueueing is backend-specific (it
// joins the service's own transaction or batch) and is not part of it.
//
// Implementations: outboxrelay/pgoutbox (PostgreSQL), outboxrelay/pebbleoutbox
// (Pebble, in-process). Both must pass outboxrelay/outboxtest.
type Store interface {
	// Unsent returns up to limit unsent records in Seq order, leaving out
	// those whose Seq is in skip (sorted ascending: the records the relay
	// already holds, being published or marked). For every (topic, key),
	// no record of that key with a lower Seq may become visible later:
	// records are returned only once every lower record of their key has
	// committed (or never will).
	Unsent(ctx context.Context, limit int, skip []uint64) ([]Record, error)

	// Fence records token as the current relay's lease token. It returns
	// ErrFenced if a newer token is already recorded.
	Fence(ctx context.Context, token uint64) error

	// MarkSent marks the records with seqs as sent, if token is still the
	// current token; otherwise it marks nothing and returns ErrFenced.
	MarkSent(ctx context.Context, token uint64, seqs []uint64) error

	// Prune deletes up to limit records sent before before and returns how
	// many it deleted. It must not hold locks that block Enqueue for long.
	Prune(ctx context.Context, before time.Time, limit int) (int, error)

	// Stats returns the backlog: unsent records and the creation time of
	// the oldest one (zero when none).
	Stats(ctx context.Context) (Stats, error)
}

// Stats describes an outbox's backlog.
type Stats struct {
	Unsent       int64
	OldestUnsent time.Time
}
