-- The schema on PostgreSQL: the same tables, columns and meanings as the SQLite migrations
-- 0001–0006 reach (see migrations/*.sql for what each column is), in PostgreSQL's
-- dialect. Integers are bigint, flags are integers (0/1) as on SQLite, so one SQL text
-- serves both engines. Times are milliseconds since the Unix epoch (UTC).
CREATE TABLE tasks (
    seq bigserial PRIMARY KEY,
    id text NOT NULL UNIQUE,
    name text NOT NULL,
    label text,
    parent_id text,
    weight double precision NOT NULL DEFAULT 1,
    state text NOT NULL CHECK (state IN ('pending', 'running', 'succeeded', 'failed', 'canceled')),
    completed bigint NOT NULL DEFAULT 0 CHECK (completed >= 0),
    total bigint CHECK (total IS NULL OR total >= completed),
    unit text,
    stalled integer NOT NULL DEFAULT 0,
    stall_reason text,
    stalled_since bigint,
    stall_timeout_ms bigint NOT NULL,
    progress_timeout_ms bigint,
    cancel_requested integer NOT NULL DEFAULT 0,
    last_seq bigint,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL,
    last_signal_at bigint NOT NULL,
    last_progress_at bigint,
    finished_at bigint,
    message text,
    metadata text,
    definition text NOT NULL,
    is_root integer NOT NULL CHECK (is_root = (CASE WHEN parent_id IS NULL THEN 1 ELSE 0 END)),
    change_seq bigint NOT NULL DEFAULT 0,
    change_kind text NOT NULL DEFAULT 'task.created',
    started_at bigint,
    stall_deadline bigint,
    rate_units double precision NOT NULL DEFAULT 0,
    rate_seconds double precision NOT NULL DEFAULT 0,
    sample_at bigint,
    sample_value double precision NOT NULL DEFAULT 0,
    children_weight double precision NOT NULL DEFAULT 0,
    children_done double precision NOT NULL DEFAULT 0,
    history_points bigint NOT NULL DEFAULT 0,
    history_bucket bigint,
    depth bigint NOT NULL DEFAULT 1,
    child_count bigint NOT NULL DEFAULT 0
);
-- Ids compare byte by byte (as on SQLite), so a task prefix is one range of this index.
ALTER TABLE tasks ALTER COLUMN id SET DATA TYPE text COLLATE "C";
ALTER TABLE tasks ALTER COLUMN parent_id SET DATA TYPE text COLLATE "C";
CREATE INDEX tasks_listing ON tasks (state, is_root, stalled, seq);
CREATE INDEX tasks_by_parent ON tasks (parent_id, seq);
CREATE INDEX tasks_by_change ON tasks (change_seq);
CREATE INDEX tasks_by_finished ON tasks (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX tasks_by_deadline ON tasks (stall_deadline) WHERE stall_deadline IS NOT NULL;

CREATE TABLE tombstones (
    change_seq bigint PRIMARY KEY,
    id text COLLATE "C" NOT NULL,
    parent_id text COLLATE "C",
    created_at bigint NOT NULL,
    deleted_at bigint NOT NULL
);

-- The change sequence of every daemon sharing this database. `last_change` is the latest
-- number committed; `generation` moves with every batch that wrote anything. A writer
-- locks this row (SELECT … FOR UPDATE) first in each batch and writes both back before
-- committing, so numbers are handed out in commit order, and a daemon learns whether
-- another wrote since its last batch (its cache of tasks is then forgotten).
CREATE TABLE stream_state (
    singleton integer PRIMARY KEY CHECK (singleton = 1),
    first_seq bigint NOT NULL,
    pruned_through bigint NOT NULL,
    last_change bigint NOT NULL,
    generation bigint NOT NULL DEFAULT 0
);
INSERT INTO stream_state (singleton, first_seq, pruned_through, last_change)
SELECT 1, s, s - 1, s FROM (SELECT 1 + floor(random() * 1099511627776)::bigint AS s) AS start;

CREATE TABLE history (
    task_id text COLLATE "C" NOT NULL,
    bucket bigint NOT NULL,
    t bigint NOT NULL,
    completed bigint NOT NULL,
    total bigint,
    fraction double precision,
    PRIMARY KEY (task_id, bucket)
);

CREATE TABLE task_counts (
    state text NOT NULL,
    stalled integer NOT NULL,
    is_root integer NOT NULL,
    quantified integer NOT NULL,
    stall_reason text NOT NULL,
    n bigint NOT NULL,
    PRIMARY KEY (state, stalled, is_root, quantified, stall_reason)
);

CREATE FUNCTION task_counts_add(row_state text, row_stalled integer, row_is_root integer, row_quantified integer,
                                row_reason text, delta bigint) RETURNS void LANGUAGE sql AS $$
    INSERT INTO task_counts (state, stalled, is_root, quantified, stall_reason, n)
    VALUES (row_state, row_stalled, row_is_root, row_quantified, row_reason, delta)
    ON CONFLICT (state, stalled, is_root, quantified, stall_reason) DO UPDATE SET n = task_counts.n + delta;
$$;

CREATE FUNCTION task_counts_follow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        PERFORM task_counts_add(OLD.state, OLD.stalled, OLD.is_root,
                                CASE WHEN OLD.total IS NOT NULL OR OLD.children_weight > 0 THEN 1 ELSE 0 END,
                                coalesce(OLD.stall_reason, ''), -1);
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        PERFORM task_counts_add(NEW.state, NEW.stalled, NEW.is_root,
                                CASE WHEN NEW.total IS NOT NULL OR NEW.children_weight > 0 THEN 1 ELSE 0 END,
                                coalesce(NEW.stall_reason, ''), 1);
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER task_counts_insert AFTER INSERT ON tasks FOR EACH ROW EXECUTE FUNCTION task_counts_follow();
CREATE TRIGGER task_counts_delete AFTER DELETE ON tasks FOR EACH ROW EXECUTE FUNCTION task_counts_follow();
-- The writer names state and stalled in its UPDATE whenever a counted value changes (and
-- only then), so the trigger costs nothing on the common update that changes none.
CREATE TRIGGER task_counts_update AFTER UPDATE OF state, stalled ON tasks FOR EACH ROW
WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.stalled IS DISTINCT FROM NEW.stalled
      OR OLD.stall_reason IS DISTINCT FROM NEW.stall_reason
      OR (OLD.total IS NOT NULL OR OLD.children_weight > 0) IS DISTINCT FROM (NEW.total IS NOT NULL OR NEW.children_weight > 0))
EXECUTE FUNCTION task_counts_follow();

CREATE TABLE tokens (
    id text PRIMARY KEY,
    name text NOT NULL,
    scopes text NOT NULL,
    task_prefix text,
    secret_hash text NOT NULL UNIQUE,
    created_at bigint NOT NULL,
    expires_at bigint,
    last_used_at bigint,
    revoked_at bigint
);

CREATE TABLE token_state (
    id integer PRIMARY KEY CHECK (id = 1),
    generation bigint NOT NULL,
    required integer NOT NULL DEFAULT 0 CHECK (required IN (0, 1))
);
INSERT INTO token_state (id, generation, required) VALUES (1, 0, 0);

CREATE FUNCTION token_state_follow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO token_state (id, generation, required) VALUES (1, 1, 1)
    ON CONFLICT (id) DO UPDATE SET generation = token_state.generation + 1,
        required = CASE WHEN TG_OP = 'INSERT' THEN 1 ELSE token_state.required END;
    RETURN NULL;
END;
$$;
CREATE TRIGGER tokens_changed AFTER INSERT OR UPDATE OR DELETE ON tokens FOR EACH ROW EXECUTE FUNCTION token_state_follow();
