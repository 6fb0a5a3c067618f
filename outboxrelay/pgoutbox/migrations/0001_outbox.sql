-- One outbox of a service database, in schema {{schema}} (default
-- outboxrelay; internal/pgmigrate substitutes it). Events are appended by the
-- service's own transactions (Enqueue) and marked sent by the relay.
CREATE SCHEMA IF NOT EXISTS {{schema}};

CREATE TABLE IF NOT EXISTS {{schema}}.events (
    seq        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id   text        NOT NULL,
    topic      text        NOT NULL,
    key        text        NOT NULL,
    headers    jsonb,
    payload    bytea       NOT NULL,
    created_at timestamptz NOT NULL,
    sent_at    timestamptz
);

-- An event id is enqueued once (while its row is retained).
CREATE UNIQUE INDEX IF NOT EXISTS events_event_id ON {{schema}}.events (event_id);
-- The relay reads unsent rows in seq order: a small partial index.
CREATE INDEX IF NOT EXISTS events_unsent ON {{schema}}.events (seq) WHERE sent_at IS NULL;
-- Pruning finds sent rows by age.
CREATE INDEX IF NOT EXISTS events_sent ON {{schema}}.events (sent_at) WHERE sent_at IS NOT NULL;

-- The fencing token of the relay holding each outbox's lease. MarkSent is
-- conditioned on it.
CREATE TABLE IF NOT EXISTS {{schema}}.lease (
    outbox text   PRIMARY KEY,
    token  bigint NOT NULL
);
