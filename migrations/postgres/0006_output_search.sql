-- Each task's output tail, and search by name or id (see migrations/0011_output_search.sql).
ALTER TABLE tasks ADD COLUMN last_output text;
ALTER TABLE tasks ADD COLUMN output_lines bigint NOT NULL DEFAULT 0;

CREATE TABLE task_output (
    task_id text COLLATE "C" NOT NULL,
    slot bigint NOT NULL,
    n bigint NOT NULL,
    t bigint NOT NULL,
    line text NOT NULL,
    PRIMARY KEY (task_id, slot)
);

-- `GET /v1/tasks?q=`: `id ILIKE '%q%' OR name ILIKE '%q%'` from one trigram index over
-- both columns (pg_trgm, which Debian's server package ships; a trusted extension, so the
-- database's owner may create it). A query shorter than three characters has no trigram
-- of its own: the index is then read whole, a cost that grows with the tasks stored.
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE INDEX tasks_search ON tasks USING gin (id gin_trgm_ops, name gin_trgm_ops);
