package pginbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/msgplatform/platform/platform"
)

// Inbox is a consumer's inbox in PostgreSQL (schema platform_inbox).
type Inbox struct {
	pool *pgxpool.Pool
	cfg  platform.InboxConfig
}

var _ platform.Inbox[pgx.Tx] = (*Inbox)(nil)

// New returns the inbox of cfg.Consumer over pool. Call Migrate first.
func New(pool *pgxpool.Pool, cfg platform.InboxConfig) (*Inbox, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Inbox{pool: pool, cfg: cfg}, nil
}

// Process runs effect and records the event in one transaction, then acks
// msg. The inbox row is inserted first: a concurrent repeat waits on it
// and is then skipped.
func (i *Inbox) Process(ctx context.Context, msg platform.InboxMsg, effect func(tx pgx.Tx) error) (platform.InboxOutcome, error) {
	id, err := platform.EventIDOf(msg)
	if err != nil {
		return 0, err
	}
	outcome := platform.InboxProcessed
	err = pgx.BeginFunc(ctx, i.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO platform_inbox.processed (consumer, event_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`, i.cfg.Consumer, id)
		if err != nil {
			return fmt.Errorf("pginbox: record %s: %w", id, err)
		}
		if tag.RowsAffected() == 0 {
			outcome = platform.InboxDuplicate
			return nil
		}
		return effect(tx)
	})
	if err != nil {
		return 0, err
	}
	if err := msg.Ack(); err != nil {
		return outcome, &platform.InboxAckError{EventID: id, Err: err}
	}
	return outcome, nil
}

// errEffectFailed makes ProcessBatch's fast path roll back.
var errEffectFailed = errors.New("pginbox: an effect failed")

// ProcessBatch is Process for many messages in one transaction (one commit
// for all). The inbox rows of the whole batch are inserted first with one
// statement (ON CONFLICT DO NOTHING RETURNING), and the effects run, in the
// same transaction, only for the ids it returned: the repeats are skipped
// without a round trip each. Messages of one event id in msgs are
// processed once.
//
// A failed effect leaves neither its writes nor its row, and its message
// is not acked: when an effect fails the transaction is rolled back and
// the batch is run again with a savepoint per message (so the effects of
// a batch holding a failure run twice; they are in the rolled-back
// transaction the first time, so only effects outside the database would
// notice). It returns each message's outcome (0 for a failed one) and the
// failures.
func (i *Inbox) ProcessBatch(ctx context.Context, msgs []platform.InboxMsg, effect func(tx pgx.Tx, msg platform.InboxMsg) error) ([]platform.InboxOutcome, []error, error) {
	outcomes := make([]platform.InboxOutcome, len(msgs))
	ids, errs := eventIDs(msgs)
	first := make(map[string]int, len(msgs))
	batchIDs := make([]string, 0, len(msgs))
	for n, id := range ids {
		if id == "" {
			continue
		}
		if _, ok := first[id]; !ok {
			first[id] = n
			batchIDs = append(batchIDs, id)
		}
	}
	err := pgx.BeginFunc(ctx, i.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `INSERT INTO platform_inbox.processed (consumer, event_id)
SELECT $1, unnest($2::text[]) ON CONFLICT DO NOTHING RETURNING event_id`, i.cfg.Consumer, batchIDs)
		if err != nil {
			return fmt.Errorf("pginbox: record batch: %w", err)
		}
		inserted, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("pginbox: record batch: %w", err)
		}
		fresh := make(map[string]bool, len(inserted))
		for _, id := range inserted {
			fresh[id] = true
		}
		for n, msg := range msgs {
			switch id := ids[n]; {
			case id == "":
			case first[id] != n || !fresh[id]:
				outcomes[n] = platform.InboxDuplicate
			default:
				if err := effect(tx, msg); err != nil {
					return errEffectFailed
				}
				outcomes[n] = platform.InboxProcessed
			}
		}
		return nil
	})
	if errors.Is(err, errEffectFailed) {
		return i.processBatchSavepoints(ctx, msgs, effect)
	}
	if err != nil {
		return nil, nil, err
	}
	i.ackBatch(msgs, ids, outcomes, errs)
	return outcomes, errs, nil
}

// processBatchSavepoints is ProcessBatch with a savepoint per message, so
// a failed effect is rolled back alone (about four round trips a message).
func (i *Inbox) processBatchSavepoints(ctx context.Context, msgs []platform.InboxMsg, effect func(tx pgx.Tx, msg platform.InboxMsg) error) ([]platform.InboxOutcome, []error, error) {
	outcomes := make([]platform.InboxOutcome, len(msgs))
	ids, errs := eventIDs(msgs)
	err := pgx.BeginFunc(ctx, i.pool, func(tx pgx.Tx) error {
		for n, msg := range msgs {
			id := ids[n]
			if id == "" {
				continue
			}
			err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
				tag, err := sp.Exec(ctx, `INSERT INTO platform_inbox.processed (consumer, event_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`, i.cfg.Consumer, id)
				if err != nil {
					return err
				}
				if tag.RowsAffected() == 0 {
					outcomes[n] = platform.InboxDuplicate
					return nil
				}
				outcomes[n] = platform.InboxProcessed
				return effect(sp, msg)
			})
			if err != nil {
				outcomes[n], errs[n] = 0, err
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	i.ackBatch(msgs, ids, outcomes, errs)
	return outcomes, errs, nil
}

// eventIDs returns each message's event id, and for a message without one
// "" and EventIDOf's error in its place in errs.
func eventIDs(msgs []platform.InboxMsg) (ids []string, errs []error) {
	ids, errs = make([]string, len(msgs)), make([]error, len(msgs))
	for n, msg := range msgs {
		ids[n], errs[n] = platform.EventIDOf(msg)
	}
	return ids, errs
}

func (i *Inbox) ackBatch(msgs []platform.InboxMsg, ids []string, outcomes []platform.InboxOutcome, errs []error) {
	for n, msg := range msgs {
		if outcomes[n] != 0 {
			if err := msg.Ack(); err != nil {
				errs[n] = &platform.InboxAckError{EventID: ids[n], Err: err}
			}
		}
	}
}

// IfNewer records version as entity's version and returns true if it is
// newer than the recorded one (then apply the update in the same tx);
// false means a late or redriven event carries an older state: skip it.
func (i *Inbox) IfNewer(ctx context.Context, tx pgx.Tx, entity string, version int64) (bool, error) {
	tag, err := tx.Exec(ctx, `INSERT INTO platform_inbox.entity_versions (consumer, entity, version) VALUES ($1, $2, $3)
ON CONFLICT (consumer, entity) DO UPDATE SET version = EXCLUDED.version
WHERE platform_inbox.entity_versions.version < EXCLUDED.version`, i.cfg.Consumer, entity, version)
	if err != nil {
		return false, fmt.Errorf("pginbox: if newer %s: %w", entity, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Seen reports whether eventID was processed (and not yet pruned).
func (i *Inbox) Seen(ctx context.Context, eventID string) (bool, error) {
	var ok bool
	err := i.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM platform_inbox.processed WHERE consumer = $1 AND event_id = $2)`, i.cfg.Consumer, eventID).Scan(&ok)
	return ok, err
}

// Prune deletes rows older than the retention, PruneBatch at a time (each
// a short statement, so processing is never blocked for long), and
// returns how many it deleted.
func (i *Inbox) Prune(ctx context.Context) (int, error) {
	return i.PruneBefore(ctx, time.Now().Add(-i.cfg.Retention))
}

// PruneBefore deletes rows processed before t, in batches.
func (i *Inbox) PruneBefore(ctx context.Context, t time.Time) (int, error) {
	total := 0
	for {
		tag, err := i.pool.Exec(ctx, `DELETE FROM platform_inbox.processed WHERE (consumer, event_id) IN (
  SELECT consumer, event_id FROM platform_inbox.processed WHERE consumer = $1 AND processed_at < $2 LIMIT $3)`, i.cfg.Consumer, t, i.cfg.PruneBatch)
		if err != nil {
			return total, fmt.Errorf("pginbox: prune: %w", err)
		}
		n := int(tag.RowsAffected())
		total += n
		if n < i.cfg.PruneBatch {
			return total, nil
		}
	}
}

// RunPruner prunes every PruneInterval until ctx ends.
func (i *Inbox) RunPruner(ctx context.Context) error {
	return i.cfg.RunPruner(ctx, i.Prune)
}
