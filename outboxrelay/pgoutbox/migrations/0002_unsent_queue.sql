-- Relay bookkeeping moves out of the ~1 KB event rows into narrow tables,
-- so that marking an event sent no longer rewrites its row (an UPDATE of
-- sent_at: a new tuple with its payload and three index insertions, no HOT
-- update possible since sent_at is indexed).
--
--   unsent: one row per event not yet marked sent. A trigger adds it in the
--           enqueueing transaction, so it commits (and becomes visible)
--           together with its event: the per-key order guarantees of
--           Enqueue carry over unchanged, and writers of any version (or
--           plain SQL inserts) are covered. MarkSent deletes it.
--   sent:   (seq, sent_at) of the events marked sent since this migration,
--           for pruning after the retention.
--   fence:  the fencing token (replaces lease, see below).
--
-- Events sent before this migration keep their sent_at and are pruned by
-- it (index events_sent); events unsent at migration time are queued here.
-- CREATE TRIGGER locks events against writes until this transaction
-- commits, so no event is enqueued between the trigger and the copy.
CREATE TABLE {{schema}}.unsent (
    seq bigint PRIMARY KEY
);

CREATE TABLE {{schema}}.sent (
    seq     bigint      NOT NULL,
    sent_at timestamptz NOT NULL
);
CREATE INDEX sent_sent_at ON {{schema}}.sent (sent_at);

-- A row trigger: for the one-row INSERT of Enqueue it costs about what the
-- dropped partial index events_unsent did (a statement trigger with a
-- transition table measured ~10% slower per Enqueue).
CREATE FUNCTION {{schema}}.events_enqueued() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {{schema}}.unsent (seq) VALUES (NEW.seq);
    RETURN NULL;
END
$$;

CREATE TRIGGER events_enqueued AFTER INSERT ON {{schema}}.events
    FOR EACH ROW EXECUTE FUNCTION {{schema}}.events_enqueued();

-- An event deleted by hand (or truncated) leaves the queue too, so the
-- queue never holds seqs without an event (a run of them would hide the
-- events behind it from Unsent's window). Prune's deletes fire it once per
-- batch, finding nothing to delete.
CREATE FUNCTION {{schema}}.events_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM {{schema}}.unsent u USING old_rows o WHERE u.seq = o.seq;
    RETURN NULL;
END
$$;

CREATE TRIGGER events_deleted AFTER DELETE ON {{schema}}.events
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.events_deleted();

CREATE FUNCTION {{schema}}.events_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM {{schema}}.unsent;
    RETURN NULL;
END
$$;

CREATE TRIGGER events_truncated AFTER TRUNCATE ON {{schema}}.events
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.events_truncated();

INSERT INTO {{schema}}.unsent (seq) SELECT seq FROM {{schema}}.events WHERE sent_at IS NULL;

-- New events keep sent_at NULL: this index would hold every one of them.
DROP INDEX IF EXISTS {{schema}}.events_unsent;

-- The fencing token moves to table fence. A relay built before this
-- migration reads sent_at and would republish every event marked since,
-- so it is locked out: lease.token is set to the largest bigint, its Fence
-- and MarkSent fail with ErrFenced from now on, and it stops publishing at
-- its next mark (until then it sees only events that are really unsent).
CREATE TABLE {{schema}}.fence (
    outbox text   PRIMARY KEY,
    token  bigint NOT NULL
);
INSERT INTO {{schema}}.fence (outbox, token) SELECT outbox, token FROM {{schema}}.lease;
INSERT INTO {{schema}}.lease AS l (outbox, token) VALUES ('default', 9223372036854775807)
    ON CONFLICT (outbox) DO UPDATE SET token = EXCLUDED.token;
