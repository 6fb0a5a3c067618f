package pebbleoutbox

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/msgplatform/platform/outboxrelay"
)

// Options configure a Store.
type Options struct {
	// Prefix of every key the outbox writes (default "outboxrelay/"); the
	// service's own keys must not start with it.
	Prefix string
}

// Store is an outbox in a Pebble database the service also writes its own
// data to.
//
// Single writer: exactly one Store may exist per database (Pebble's
// directory lock already keeps other processes out). The Store hands out
// sequence numbers from memory, so two Stores on one database would reuse
// them.
type Store struct {
	db     *pebble.DB
	unsent []byte // prefix + "u"
	sent   []byte // prefix + "s"
	fence  []byte // prefix + "f": the fencing token, 8 bytes big-endian

	mu       sync.Mutex
	next     uint64                     // last seq handed out
	pending  map[*pebble.Batch][]uint64 // seqs of batches not yet committed or discarded
	scanFrom uint64                     // every unsent seq is >= scanFrom

	markMu sync.Mutex
	token  uint64 // the token recorded under fence (loaded by Open)
}

var _ outboxrelay.Store = (*Store)(nil)

// Open returns the outbox kept in db, which the caller owns (and closes
// after the relay and the Store are done).
func Open(db *pebble.DB, o Options) (*Store, error) {
	if o.Prefix == "" {
		o.Prefix = "outboxrelay/"
	}
	s := &Store{
		db:      db,
		unsent:  []byte(o.Prefix + "u"),
		sent:    []byte(o.Prefix + "s"),
		fence:   []byte(o.Prefix + "f"),
		pending: map[*pebble.Batch][]uint64{},
	}
	v, closer, err := db.Get(s.fence)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
	case err != nil:
		return nil, fmt.Errorf("pebbleoutbox: open: fencing token: %w", err)
	default:
		if len(v) != 8 {
			closer.Close()
			return nil, fmt.Errorf("pebbleoutbox: open: fencing token under %q is %d bytes, want 8", s.fence, len(v))
		}
		s.token = binary.BigEndian.Uint64(v)
		closer.Close()
	}
	for _, p := range [][]byte{s.unsent, s.sent} {
		last, err := s.lastSeq(p)
		if err != nil {
			return nil, err
		}
		s.next = max(s.next, last)
	}
	return s, nil
}

func (s *Store) lastSeq(prefix []byte) (uint64, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: key(prefix, math.MaxUint64)})
	if err != nil {
		return 0, fmt.Errorf("pebbleoutbox: open: %w", err)
	}
	defer it.Close()
	if it.Last() {
		return binary.BigEndian.Uint64(it.Key()[len(prefix):]), nil
	}
	return 0, it.Error()
}

func key(prefix []byte, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(append(make([]byte, 0, len(prefix)+8), prefix...), seq)
}

// Enqueue adds ev to b, the batch that also holds the service's business
// write. The event exists if and only if b is committed. b must then be
// committed with Commit (or released with Discard), not b.Commit: until
// then the relay holds back every later event, which is what keeps
// per-key commit order.
func (s *Store) Enqueue(b *pebble.Batch, ev outboxrelay.Event) error {
	if err := ev.Validate(); err != nil {
		return err
	}
	if ev.CreatedAt.IsZero() {
		ev.CreatedAt = time.Now()
	}
	s.mu.Lock()
	s.next++
	seq := s.next
	s.pending[b] = append(s.pending[b], seq)
	s.mu.Unlock()
	if err := b.Set(key(s.unsent, seq), encode(&ev), nil); err != nil {
		return fmt.Errorf("pebbleoutbox: enqueue %s: %w", ev.ID, err)
	}
	return nil
}

// Commit commits b (opts nil = pebble.Sync) and releases its events to
// the relay. It does not close b.
func (s *Store) Commit(b *pebble.Batch, opts *pebble.WriteOptions) error {
	if opts == nil {
		opts = pebble.Sync
	}
	err := b.Commit(opts)
	s.release(b)
	if err != nil {
		return fmt.Errorf("pebbleoutbox: commit: %w", err)
	}
	return nil
}

// Discard closes b without committing it and forgets its events.
func (s *Store) Discard(b *pebble.Batch) error {
	s.release(b)
	return b.Close()
}

// Update runs fn with a new batch and commits it (synced) if fn returns
// nil; fn writes the business data and calls Enqueue on the same batch.
func (s *Store) Update(fn func(b *pebble.Batch) error) error {
	b := s.db.NewBatch()
	if err := fn(b); err != nil {
		_ = s.Discard(b)
		return err
	}
	defer b.Close()
	return s.Commit(b, pebble.Sync)
}

func (s *Store) release(b *pebble.Batch) {
	s.mu.Lock()
	delete(s.pending, b)
	s.mu.Unlock()
}

// Unsent implements outboxrelay.Store. It returns only records below the
// lowest seq of a batch not yet committed, so a record never becomes
// visible behind a later one.
func (s *Store) Unsent(ctx context.Context, limit int, skip []uint64) ([]outboxrelay.Record, error) {
	s.mu.Lock()
	low := s.next + 1
	for _, seqs := range s.pending {
		for _, q := range seqs {
			low = min(low, q)
		}
	}
	from := s.scanFrom
	s.mu.Unlock()
	it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: key(s.unsent, from), UpperBound: key(s.unsent, low)})
	if err != nil {
		return nil, fmt.Errorf("pebbleoutbox: unsent: %w", err)
	}
	defer it.Close()
	var out []outboxrelay.Record
	first := low // the lowest unsent seq, skipped or not
	for ok := it.First(); ok && len(out) < limit; {
		seq := binary.BigEndian.Uint64(it.Key()[len(s.unsent):])
		first = min(first, seq)
		for len(skip) > 0 && skip[0] < seq {
			skip = skip[1:]
		}
		if len(skip) > 0 && skip[0] == seq {
			// Seek past the run of consecutive skipped seqs (the relay's
			// records in flight are mostly one run).
			j := 0
			for j+1 < len(skip) && skip[j+1] == skip[j]+1 {
				j++
			}
			next := skip[j] + 1
			skip = skip[j+1:]
			ok = it.SeekGE(key(s.unsent, next))
			continue
		}
		rec := outboxrelay.Record{Seq: seq}
		if err := decode(it.Value(), &rec.Event); err != nil {
			return nil, fmt.Errorf("pebbleoutbox: record %d: %w", rec.Seq, err)
		}
		out = append(out, rec)
		ok = it.Next()
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("pebbleoutbox: unsent: %w", err)
	}
	// Everything in [from, first) is sent: start the next scan there,
	// past the deletion tombstones.
	s.mu.Lock()
	s.scanFrom = max(s.scanFrom, first)
	s.mu.Unlock()
	return out, nil
}

// Fence implements outboxrelay.Store. The token is stored in the
// database (synced) before it takes effect, so a relay restarted with the
// database still refuses the tokens of the relays before it; the check
// itself reads the copy in memory, as every relay fencing this store lives
// in this process (Pebble's directory lock).
func (s *Store) Fence(_ context.Context, token uint64) error {
	s.markMu.Lock()
	defer s.markMu.Unlock()
	if token < s.token {
		return fmt.Errorf("%w: token %d < %d", outboxrelay.ErrFenced, token, s.token)
	}
	if token == s.token {
		return nil
	}
	if err := s.db.Set(s.fence, binary.BigEndian.AppendUint64(nil, token), pebble.Sync); err != nil {
		return fmt.Errorf("pebbleoutbox: fence: %w", err)
	}
	s.token = token
	return nil
}

// MarkSent implements outboxrelay.Store: in one batch, each record's
// unsent key is deleted and a sent key holding only the time it was sent
// is written (Prune reads it; the payload is not copied, so marking costs
// no read and little write). The batch is not synced: a mark lost to a
// power cut only means a republish, deduplicated by Nats-Msg-Id.
func (s *Store) MarkSent(_ context.Context, token uint64, seqs []uint64) error {
	s.markMu.Lock()
	defer s.markMu.Unlock()
	if token != s.token {
		return fmt.Errorf("%w: token %d, current %d", outboxrelay.ErrFenced, token, s.token)
	}
	b := s.db.NewBatch()
	defer b.Close()
	var ts [8]byte
	binary.BigEndian.PutUint64(ts[:], uint64(time.Now().UnixNano()))
	for _, seq := range seqs {
		if err := b.Set(key(s.sent, seq), ts[:], nil); err != nil {
			return fmt.Errorf("pebbleoutbox: mark sent: %w", err)
		}
		if err := b.Delete(key(s.unsent, seq), nil); err != nil {
			return fmt.Errorf("pebbleoutbox: mark sent: %w", err)
		}
	}
	if err := b.Commit(pebble.NoSync); err != nil {
		return fmt.Errorf("pebbleoutbox: mark sent: %w", err)
	}
	return nil
}

// Prune implements outboxrelay.Store: it deletes the oldest sent records
// (in seq order, up to the first one sent at or after before) with one
// range deletion.
func (s *Store) Prune(ctx context.Context, before time.Time, limit int) (int, error) {
	it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: s.sent, UpperBound: key(s.sent, math.MaxUint64)})
	if err != nil {
		return 0, fmt.Errorf("pebbleoutbox: prune: %w", err)
	}
	n := 0
	var last uint64
	for ok := it.First(); ok && n < limit; ok = it.Next() {
		v := it.Value()
		if len(v) < 8 || int64(binary.BigEndian.Uint64(v)) >= before.UnixNano() {
			break
		}
		last = binary.BigEndian.Uint64(it.Key()[len(s.sent):])
		n++
	}
	err = errors.Join(it.Error(), it.Close())
	if err != nil || n == 0 {
		return 0, err
	}
	if err := s.db.DeleteRange(s.sent, key(s.sent, last+1), pebble.NoSync); err != nil {
		return 0, fmt.Errorf("pebbleoutbox: prune: %w", err)
	}
	return n, nil
}

// Stats implements outboxrelay.Store (it counts the unsent records).
func (s *Store) Stats(ctx context.Context) (outboxrelay.Stats, error) {
	var st outboxrelay.Stats
	s.mu.Lock()
	from := s.scanFrom
	s.mu.Unlock()
	it, err := s.db.NewIterWithContext(ctx, &pebble.IterOptions{LowerBound: key(s.unsent, from), UpperBound: key(s.unsent, math.MaxUint64)})
	if err != nil {
		return st, fmt.Errorf("pebbleoutbox: stats: %w", err)
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		if st.Unsent == 0 {
			var ev outboxrelay.Event
			if err := decode(it.Value(), &ev); err == nil {
				st.OldestUnsent = ev.CreatedAt
			}
		}
		st.Unsent++
	}
	return st, it.Error()
}
