-- MarkSent logs one row per call, holding every seq it marked, instead of
-- one row per event in sent: marking n events costs n deletions from
-- unsent and one insertion (and one index entry) rather than n of each,
-- about a third of the database CPU a mark spends per event at relay
-- throughput. Prune deletes the oldest rows whole, or trims the seqs of
-- the last one it reaches when that one holds more than its batch.
--
-- sent keeps the rows written before this migration, and those a relay of
-- the previous version (still running during a rolling upgrade) writes;
-- Prune empties it as before. Such a relay's Prune does not read
-- sent_batches: the events logged there are pruned by an upgraded relay.
CREATE TABLE {{schema}}.sent_batches (
    id      bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sent_at timestamptz NOT NULL,
    seqs    bigint[]    NOT NULL
);
CREATE INDEX sent_batches_sent_at ON {{schema}}.sent_batches (sent_at, id);
