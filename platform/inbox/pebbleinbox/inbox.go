package pebbleinbox

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/msgplatform/platform/platform"
)

// Options configure an Inbox.
type Options struct {
	// Prefix of every key the inbox writes (default "inbox/"); the
	// service's own keys must not start with it.
	Prefix string
}

// Inbox is a consumer's inbox in a Pebble database the service also keeps
// its data in. Keys: <prefix>p/<consumer>\x00<event id> -> processed time,
// <prefix>t/<consumer>\x00<time><event id> (the pruning index),
// <prefix>v/<consumer>\x00<entity> -> version.
type Inbox struct {
	db    *pebble.DB
	cfg   platform.InboxConfig
	p     []byte // processed rows of this consumer
	t     []byte // time index of this consumer
	v     []byte // entity versions of this consumer
	locks [64]sync.Mutex
}

var _ platform.Inbox[*pebble.Batch] = (*Inbox)(nil)

// New returns the inbox of cfg.Consumer in db (which the caller owns).
func New(db *pebble.DB, cfg platform.InboxConfig, o Options) (*Inbox, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if o.Prefix == "" {
		o.Prefix = "inbox/"
	}
	c := cfg.Consumer + "\x00"
	return &Inbox{
		db: db, cfg: cfg,
		p: []byte(o.Prefix + "p/" + c), t: []byte(o.Prefix + "t/" + c), v: []byte(o.Prefix + "v/" + c),
	}, nil
}

func cat(a []byte, parts ...[]byte) []byte {
	out := append([]byte(nil), a...)
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func (i *Inbox) lock(id string) *sync.Mutex {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return &i.locks[h.Sum32()%uint32(len(i.locks))]
}

func (i *Inbox) seen(id string) (bool, error) {
	_, closer, err := i.db.Get(cat(i.p, []byte(id)))
	if errors.Is(err, pebble.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("pebbleinbox: %w", err)
	}
	closer.Close()
	return true, nil
}

// record adds the inbox row of id to b.
func (i *Inbox) record(b *pebble.Batch, id string, now time.Time) error {
	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], uint64(now.UnixNano()))
	if err := b.Set(cat(i.p, []byte(id)), ts[:], nil); err != nil {
		return err
	}
	return b.Set(cat(i.t, ts[:], []byte(id)), nil, nil)
}

// Seen reports whether eventID was processed (and not yet pruned).
func (i *Inbox) Seen(eventID string) (bool, error) { return i.seen(eventID) }

// Process runs effect on a new batch, adds the inbox row to it, commits
// it synced, then acks msg. Effect reads go to the database (the batch is
// not indexed). Repeats of one event id are serialised.
func (i *Inbox) Process(ctx context.Context, msg platform.InboxMsg, effect func(b *pebble.Batch) error) (platform.InboxOutcome, error) {
	id, err := platform.EventIDOf(msg)
	if err != nil {
		return 0, err
	}
	mu := i.lock(id)
	mu.Lock()
	outcome, err := i.processLocked(id, effect)
	mu.Unlock()
	if err != nil {
		return 0, err
	}
	if err := msg.Ack(); err != nil {
		return outcome, &platform.InboxAckError{EventID: id, Err: err}
	}
	return outcome, nil
}

func (i *Inbox) processLocked(id string, effect func(b *pebble.Batch) error) (platform.InboxOutcome, error) {
	seen, err := i.seen(id)
	if err != nil {
		return 0, err
	}
	if seen {
		return platform.InboxDuplicate, nil
	}
	b := i.db.NewBatch()
	defer b.Close()
	if err := effect(b); err != nil {
		return 0, err
	}
	if err := i.record(b, id, time.Now()); err != nil {
		return 0, fmt.Errorf("pebbleinbox: %w", err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		return 0, fmt.Errorf("pebbleinbox: commit: %w", err)
	}
	return platform.InboxProcessed, nil
}

// ProcessBatch is Process for many messages with one synced commit: each
// effect writes into its own batch, merged into the group's batch only if
// it succeeds, so a failed effect leaves no writes and no row (and its
// message is not acked). Messages of one event id in msgs are processed
// once. Calls must not overlap with other Process or ProcessBatch calls
// for the same messages (one caller per partition, as a consumer runs).
func (i *Inbox) ProcessBatch(ctx context.Context, msgs []platform.InboxMsg, effect func(b *pebble.Batch, msg platform.InboxMsg) error) ([]platform.InboxOutcome, []error, error) {
	outcomes := make([]platform.InboxOutcome, len(msgs))
	errs := make([]error, len(msgs))
	group := i.db.NewBatch()
	defer group.Close()
	inBatch := map[string]bool{}
	now := time.Now()
	for n, msg := range msgs {
		id, err := platform.EventIDOf(msg)
		if err != nil {
			errs[n] = err
			continue
		}
		seen, err := i.seen(id)
		if err != nil {
			return nil, nil, err
		}
		if seen || inBatch[id] {
			outcomes[n] = platform.InboxDuplicate
			continue
		}
		b := i.db.NewBatch()
		if err := effect(b, msg); err != nil {
			b.Close()
			errs[n] = err
			continue
		}
		err = group.Apply(b, nil)
		b.Close()
		if err == nil {
			err = i.record(group, id, now)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("pebbleinbox: %w", err)
		}
		inBatch[id] = true
		outcomes[n] = platform.InboxProcessed
	}
	if !group.Empty() {
		if err := group.Commit(pebble.Sync); err != nil {
			return nil, nil, fmt.Errorf("pebbleinbox: commit: %w", err)
		}
	}
	for n, msg := range msgs {
		if outcomes[n] != 0 {
			if err := msg.Ack(); err != nil {
				errs[n] = &platform.InboxAckError{Err: err}
			}
		}
	}
	return outcomes, errs, nil
}

// IfNewer adds version as entity's version to b and returns true if it is
// newer than the committed one (apply the update in b too); false means a
// late or redriven event carries an older state: skip it.
func (i *Inbox) IfNewer(b *pebble.Batch, entity string, version uint64) (bool, error) {
	k := cat(i.v, []byte(entity))
	v, closer, err := i.db.Get(k)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return false, fmt.Errorf("pebbleinbox: %w", err)
	default:
		cur := binary.BigEndian.Uint64(v)
		closer.Close()
		if version <= cur {
			return false, nil
		}
	}
	return true, b.Set(k, binary.BigEndian.AppendUint64(nil, version), nil)
}

// Prune deletes rows older than the retention in batches of PruneBatch
// (each its own small commit) and returns how many it deleted.
func (i *Inbox) Prune(ctx context.Context) (int, error) {
	return i.PruneBefore(ctx, time.Now().Add(-i.cfg.Retention))
}

// PruneBefore deletes rows processed before t, in batches.
func (i *Inbox) PruneBefore(ctx context.Context, t time.Time) (int, error) {
	var upper [8]byte
	binary.BigEndian.PutUint64(upper[:], uint64(t.UnixNano()))
	total := 0
	for ctx.Err() == nil {
		it, err := i.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: i.t, UpperBound: cat(i.t, upper[:])})
		if err != nil {
			return total, fmt.Errorf("pebbleinbox: prune: %w", err)
		}
		b := i.db.NewBatch()
		n := 0
		for ok := it.First(); ok && n < i.cfg.PruneBatch; ok = it.Next() {
			k := it.Key()
			id := k[len(i.t)+8:]
			_ = b.Delete(cat(i.p, id), nil)
			_ = b.Delete(append([]byte(nil), k...), nil)
			n++
		}
		err = errors.Join(it.Error(), it.Close())
		if err == nil && n > 0 {
			err = b.Commit(pebble.NoSync)
		}
		b.Close()
		if err != nil {
			return total, fmt.Errorf("pebbleinbox: prune: %w", err)
		}
		total += n
		if n < i.cfg.PruneBatch {
			return total, nil
		}
	}
	return total, ctx.Err()
}

// RunPruner prunes every PruneInterval until ctx ends.
func (i *Inbox) RunPruner(ctx context.Context) error {
	return i.cfg.RunPruner(ctx, i.Prune)
}
