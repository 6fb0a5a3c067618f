package pgoutbox

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/msgplatform/platform/internal/pgmigrate"
	"github.com/msgplatform/platform/outboxrelay"
)

// lockClass is the first key of the two-key advisory locks Enqueue takes
// per (topic, key); the two-key space never collides with one-key locks.
const lockClass = 0x0b0c

// leaseRow names the outbox's row in its schema's lease table (one outbox
// per schema).
const leaseRow = "default"

// enqueueSQL takes a transaction-scoped advisory lock on the event's
// (topic, key) before the identity value is drawn, so two transactions
// enqueueing one key are serialised: the second draws its seq after the
// first has committed or rolled back. Hence, per key, seq order is commit
// order and no lower seq of a key can appear after a higher one is
// visible. One round trip.
const enqueueSQL = `WITH l AS (SELECT pg_advisory_xact_lock($7, hashtext(%s$2 || '.' || $3)))
INSERT INTO %s.events (event_id, topic, key, headers, payload, created_at)
SELECT $1, $2, $3, $4::jsonb, $5, $6 FROM l`

// DefaultSchema holds the outbox when Options.Schema is empty.
const DefaultSchema = "outboxrelay"

// defaultOutbox is the outbox the package-level functions use.
var defaultOutbox = outboxSQL(DefaultSchema)

// sqlText are an outbox's statements, for its schema.
type sqlText struct {
	schema  string
	enqueue string
}

// outboxSQL returns the statements of the outbox in schema. The advisory
// lock of the default schema hashes topic.key as it always has (binaries
// of different versions must serialise on it); another schema's hashes
// schema:topic.key, so outboxes do not wait for each other.
func outboxSQL(schema string) sqlText {
	salt := ""
	if schema != DefaultSchema {
		salt = "'" + schema + ":' || "
	}
	return sqlText{schema: schema, enqueue: fmt.Sprintf(enqueueSQL, salt, schema)}
}

func enqueueArgs(ev *outboxrelay.Event) ([]any, error) {
	if err := ev.Validate(); err != nil {
		return nil, err
	}
	if ev.CreatedAt.IsZero() {
		ev.CreatedAt = time.Now()
	}
	var headers *string
	if len(ev.Headers) > 0 {
		b, err := json.Marshal(ev.Headers)
		if err != nil {
			return nil, fmt.Errorf("%w: event %s: headers: %w", outboxrelay.ErrInvalidEvent, ev.ID, err)
		}
		s := string(b)
		headers = &s
	}
	payload := ev.Payload
	if payload == nil {
		payload = []byte{}
	}
	return []any{ev.ID, ev.Topic, ev.Key, headers, payload, ev.CreatedAt, int32(lockClass)}, nil
}

// Enqueue appends ev to the outbox in the caller's transaction tx: the
// event exists if and only if tx commits. ev.CreatedAt is set when zero.
// It fails with outboxrelay.ErrInvalidEvent (nothing written) for an event
// without id, topic or a valid key, and with a unique violation if the id
// is already in the outbox.
//
// It writes to the outbox in the default schema (outboxrelay); for another
// one, use Store.Enqueue.
func Enqueue(ctx context.Context, tx pgx.Tx, ev outboxrelay.Event) error {
	return defaultOutbox.enqueueTx(ctx, tx, ev)
}

func (q sqlText) enqueueTx(ctx context.Context, tx pgx.Tx, ev outboxrelay.Event) error {
	return q.enqueueWith(ev, func(args ...any) error {
		_, err := tx.Exec(ctx, q.enqueue, args...)
		return err
	})
}

// enqueueWith validates ev and runs the enqueue statement with its
// arguments through exec, naming ev in the error.
func (q sqlText) enqueueWith(ev outboxrelay.Event, exec func(args ...any) error) error {
	args, err := enqueueArgs(&ev)
	if err != nil {
		return err
	}
	if err := exec(args...); err != nil {
		return fmt.Errorf("pgoutbox: enqueue %s: %w", ev.ID, err)
	}
	return nil
}

// EnqueueSQL is Enqueue for a database/sql transaction (e.g. opened with
// the pgx stdlib driver), to the outbox in the default schema.
func EnqueueSQL(ctx context.Context, tx *sql.Tx, ev outboxrelay.Event) error {
	return defaultOutbox.enqueueSQLTx(ctx, tx, ev)
}

func (q sqlText) enqueueSQLTx(ctx context.Context, tx *sql.Tx, ev outboxrelay.Event) error {
	return q.enqueueWith(ev, func(args ...any) error {
		_, err := tx.ExecContext(ctx, q.enqueue, args...)
		return err
	})
}

// Store is a PostgreSQL outbox the relay reads: schema outboxrelay, or
// the one of Options.Schema.
type Store struct {
	pool *pgxpool.Pool
	q    sqlText
}

var _ outboxrelay.Store = (*Store)(nil)

// Options configure a Store.
type Options struct {
	// Schema holds the outbox's tables (default "outboxrelay"). Several
	// outboxes can share a database, one schema each: each has its own
	// migrations, events and fencing token, and needs its own relay
	// (outboxrelay.Config.Name, the lease, must differ too).
	Schema string
}

// New returns the store over pool, in the default schema. Call Migrate
// first.
func New(pool *pgxpool.Pool) *Store { return &Store{pool: pool, q: defaultOutbox} }

// Open returns the store over pool in o.Schema. It fails with
// outboxrelay.ErrInvalidConfig for a schema that is not a lower-case SQL
// identifier. Call its Migrate first.
func Open(pool *pgxpool.Pool, o Options) (*Store, error) {
	if o.Schema == "" {
		o.Schema = DefaultSchema
	}
	if !pgmigrate.ValidSchema(o.Schema) {
		return nil, fmt.Errorf("%w: pgoutbox: schema %q: want a lower-case SQL identifier (letters, digits, '_', at most 63)", outboxrelay.ErrInvalidConfig, o.Schema)
	}
	return &Store{pool: pool, q: outboxSQL(o.Schema)}, nil
}

// Schema returns the schema holding the outbox.
func (s *Store) Schema() string { return s.q.schema }

// Enqueue is the package's Enqueue for this store's outbox.
func (s *Store) Enqueue(ctx context.Context, tx pgx.Tx, ev outboxrelay.Event) error {
	return s.q.enqueueTx(ctx, tx, ev)
}

// EnqueueSQL is the package's EnqueueSQL for this store's outbox.
func (s *Store) EnqueueSQL(ctx context.Context, tx *sql.Tx, ev outboxrelay.Event) error {
	return s.q.enqueueSQLTx(ctx, tx, ev)
}

// Unsent implements outboxrelay.Store: the lowest seqs of the queue table
// unsent, then their events by primary key. The events are fetched with
// seq = ANY(ARRAY(subquery)) and sorted here, which keeps the plan an
// index lookup per record whatever the table statistics (a join may be
// planned as a hash join with a sort of the payloads spilling to disk, or
// a merge join reading the retained sent rows). The skip list is an array
// parameter matched through a hashed subplan (NOT IN (SELECT unnest)), so
// a long one costs one hash probe per row, not a scan of the list. Both
// tables are read in one statement, hence one snapshot: a queued seq's
// event is always there (they commit together).
func (s *Store) Unsent(ctx context.Context, limit int, skip []uint64) ([]outboxrelay.Record, error) {
	ids := make([]int64, len(skip))
	for i, v := range skip {
		ids[i] = int64(v)
	}
	rows, err := s.pool.Query(ctx, `SELECT seq, event_id, topic, key, headers, payload, created_at
FROM `+s.q.schema+`.events WHERE seq = ANY(ARRAY(
  SELECT seq FROM `+s.q.schema+`.unsent WHERE seq NOT IN (SELECT unnest($2::bigint[]))
  ORDER BY seq LIMIT $1))`, limit, ids)
	if err != nil {
		return nil, fmt.Errorf("pgoutbox: unsent: %w", err)
	}
	defer rows.Close()
	var out []outboxrelay.Record
	for rows.Next() {
		var rec outboxrelay.Record
		var headers []byte
		if err := rows.Scan(&rec.Seq, &rec.ID, &rec.Topic, &rec.Key, &headers, &rec.Payload, &rec.CreatedAt); err != nil {
			return nil, fmt.Errorf("pgoutbox: unsent: %w", err)
		}
		if len(headers) > 0 {
			if err := json.Unmarshal(headers, &rec.Headers); err != nil {
				return nil, fmt.Errorf("pgoutbox: event %s: headers: %w", rec.ID, err)
			}
		}
		out = append(out, rec)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgoutbox: unsent: %w", err)
	}
	slices.SortFunc(out, func(a, b outboxrelay.Record) int { return cmp.Compare(a.Seq, b.Seq) })
	return out, nil
}

// Fence implements outboxrelay.Store: the token is stored in the
// schema's fence table unless a newer one is there.
func (s *Store) Fence(ctx context.Context, token uint64) error {
	var got int64
	err := s.pool.QueryRow(ctx, `INSERT INTO `+s.q.schema+`.fence AS l (outbox, token) VALUES ($1, $2)
ON CONFLICT (outbox) DO UPDATE SET token = EXCLUDED.token WHERE l.token <= EXCLUDED.token
RETURNING token`, leaseRow, int64(token)).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: token %d is older than the recorded one", outboxrelay.ErrFenced, token)
	}
	if err != nil {
		return fmt.Errorf("pgoutbox: fence: %w", err)
	}
	return nil
}

// MarkSent implements outboxrelay.Store: the seqs leave the queue table
// unsent and are logged, as one row, in sent_batches (migration 0003), in
// one statement that holds a share lock on the fence row, so a newer
// relay's Fence waits for it and every later mark by the old relay marks
// nothing. The event rows are not touched.
func (s *Store) MarkSent(ctx context.Context, token uint64, seqs []uint64) error {
	if len(seqs) == 0 {
		return nil
	}
	ids := make([]int64, len(seqs))
	for i, v := range seqs {
		ids[i] = int64(v)
	}
	var fenced bool
	err := s.pool.QueryRow(ctx, `WITH f AS (
  SELECT token FROM `+s.q.schema+`.fence WHERE outbox = $1 FOR SHARE
), d AS (
  DELETE FROM `+s.q.schema+`.unsent
  WHERE seq = ANY($3) AND EXISTS (SELECT 1 FROM f WHERE token = $2)
  RETURNING seq
), i AS (
  INSERT INTO `+s.q.schema+`.sent_batches (sent_at, seqs)
  SELECT now(), array_agg(seq) FROM d HAVING count(*) > 0
)
SELECT NOT EXISTS (SELECT 1 FROM f WHERE token = $2)`, leaseRow, int64(token), ids).Scan(&fenced)
	if err != nil {
		return fmt.Errorf("pgoutbox: mark sent: %w", err)
	}
	if fenced {
		return fmt.Errorf("%w: token %d is no longer current", outboxrelay.ErrFenced, token)
	}
	return nil
}

// Prune implements outboxrelay.Store: the events of the oldest rows of
// sent_batches, in one short transaction per batch (the last row reached
// is trimmed when it holds more seqs than the batch has room for). Once
// sent_batches has nothing old enough left, the entries of sent (marked
// before migration 0003) go the same way, then the events marked before
// migration 0002 (sent_at set), by their sent_at.
func (s *Store) Prune(ctx context.Context, before time.Time, limit int) (int, error) {
	n, err := s.pruneBatches(ctx, before, limit)
	if err != nil || n >= limit {
		return n, err
	}
	tag, err := s.pool.Exec(ctx, `WITH p AS (
  DELETE FROM `+s.q.schema+`.sent WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM `+s.q.schema+`.sent WHERE sent_at < $1 ORDER BY sent_at LIMIT $2))
  RETURNING seq
)
DELETE FROM `+s.q.schema+`.events WHERE seq IN (SELECT seq FROM p)`, before, limit-n)
	if err != nil {
		return n, fmt.Errorf("pgoutbox: prune: %w", err)
	}
	n += int(tag.RowsAffected())
	if n >= limit {
		return n, nil
	}
	tag, err = s.pool.Exec(ctx, `DELETE FROM `+s.q.schema+`.events WHERE seq IN (
  SELECT seq FROM `+s.q.schema+`.events WHERE sent_at IS NOT NULL AND sent_at < $1 ORDER BY sent_at LIMIT $2)`, before, limit-n)
	if err != nil {
		return n, fmt.Errorf("pgoutbox: prune: %w", err)
	}
	return n + int(tag.RowsAffected()), nil
}

// pruneBatches deletes the events of up to limit seqs logged in
// sent_batches before before, oldest first, and returns how many events
// it deleted.
func (s *Store) pruneBatches(ctx context.Context, before time.Time, limit int) (int, error) {
	n := 0
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id, seqs FROM `+s.q.schema+`.sent_batches
WHERE sent_at < $1 ORDER BY sent_at, id LIMIT $2 FOR UPDATE`, before, limit)
		if err != nil {
			return err
		}
		var take, done []int64 // seqs to prune, rows consumed whole
		var trimID int64       // the row keeping rest, if any
		var rest []int64
		var id int64
		var seqs []int64
		_, err = pgx.ForEachRow(rows, []any{&id, &seqs}, func() error {
			switch room := limit - len(take); {
			case room <= 0:
			case len(seqs) <= room:
				take = append(take, seqs...)
				done = append(done, id)
			default:
				take = append(take, seqs[:room]...)
				trimID, rest = id, slices.Clone(seqs[room:])
			}
			return nil
		})
		if err != nil || len(take) == 0 {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM `+s.q.schema+`.events WHERE seq = ANY($1)`, take)
		if err != nil {
			return err
		}
		n = int(tag.RowsAffected())
		if len(done) > 0 {
			if _, err := tx.Exec(ctx, `DELETE FROM `+s.q.schema+`.sent_batches WHERE id = ANY($1)`, done); err != nil {
				return err
			}
		}
		if rest != nil {
			if _, err := tx.Exec(ctx, `UPDATE `+s.q.schema+`.sent_batches SET seqs = $2 WHERE id = $1`, trimID, rest); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("pgoutbox: prune: %w", err)
	}
	return n, nil
}

// Stats implements outboxrelay.Store.
func (s *Store) Stats(ctx context.Context) (outboxrelay.Stats, error) {
	var st outboxrelay.Stats
	var oldest *time.Time
	err := s.pool.QueryRow(ctx, `SELECT
  (SELECT count(*) FROM `+s.q.schema+`.unsent),
  (SELECT created_at FROM `+s.q.schema+`.events WHERE seq = (SELECT min(seq) FROM `+s.q.schema+`.unsent))`).Scan(&st.Unsent, &oldest)
	if err != nil {
		return st, fmt.Errorf("pgoutbox: stats: %w", err)
	}
	if oldest != nil {
		st.OldestUnsent = *oldest
	}
	return st, nil
}

// IsUniqueViolation reports whether err is an Enqueue of an event id
// already in the outbox.
func IsUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}
