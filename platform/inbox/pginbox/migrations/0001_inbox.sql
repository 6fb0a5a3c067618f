-- One row per (consumer, event id) whose effect was committed.
CREATE TABLE IF NOT EXISTS platform_inbox.processed (
    consumer     text        NOT NULL,
    event_id     text        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);
CREATE INDEX IF NOT EXISTS processed_at ON platform_inbox.processed (consumer, processed_at);

-- The last applied version of each entity, for IfNewer.
CREATE TABLE IF NOT EXISTS platform_inbox.entity_versions (
    consumer text   NOT NULL,
    entity   text   NOT NULL,
    version  bigint NOT NULL,
    PRIMARY KEY (consumer, entity)
);
