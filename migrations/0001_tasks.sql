-- Tasks: one row per task. Times are milliseconds since the Unix epoch (UTC).
-- `seq` orders tasks by creation (newest = highest) and is the key of keyset paging.
CREATE TABLE tasks (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    label TEXT,
    parent_id TEXT,
    weight REAL NOT NULL DEFAULT 1,
    state TEXT NOT NULL CHECK (state IN ('pending', 'running', 'succeeded', 'failed', 'canceled')),
    completed INTEGER NOT NULL DEFAULT 0 CHECK (completed >= 0),
    total INTEGER CHECK (total IS NULL OR total >= completed),
    unit TEXT,
    stalled INTEGER NOT NULL DEFAULT 0,
    stall_reason TEXT,
    stalled_since INTEGER,
    stall_timeout_ms INTEGER NOT NULL,
    progress_timeout_ms INTEGER,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    last_seq INTEGER,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    last_signal_at INTEGER NOT NULL,
    last_progress_at INTEGER,
    finished_at INTEGER,
    message TEXT,
    metadata TEXT,
    definition TEXT NOT NULL,
    -- 1 for a task without parent; a real column (not a generated one) so that the
    -- listing index below covers its queries.
    is_root INTEGER NOT NULL CHECK (is_root = (parent_id IS NULL))
) STRICT;

-- Listing reads keys from these in seq order, one range per combination of the filter
-- values, so a page costs the same however many tasks exist.
CREATE INDEX tasks_listing ON tasks (state, is_root, stalled, seq);
CREATE INDEX tasks_by_parent ON tasks (parent_id, seq);

-- How many tasks there are per (state, stalled, root or not), kept by triggers, so a
-- listing's total_size costs the same however many tasks exist.
CREATE TABLE task_counts (
    state TEXT NOT NULL,
    stalled INTEGER NOT NULL,
    is_root INTEGER NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (state, stalled, is_root)
) STRICT, WITHOUT ROWID;

CREATE TRIGGER task_counts_insert AFTER INSERT ON tasks BEGIN
    INSERT INTO task_counts (state, stalled, is_root, n)
    VALUES (new.state, new.stalled, new.is_root, 1)
    ON CONFLICT (state, stalled, is_root) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER task_counts_delete AFTER DELETE ON tasks BEGIN
    UPDATE task_counts SET n = n - 1
    WHERE state = old.state AND stalled = old.stalled AND is_root = old.is_root;
END;

CREATE TRIGGER task_counts_update AFTER UPDATE OF state, stalled ON tasks
WHEN old.state IS NOT new.state OR old.stalled IS NOT new.stalled BEGIN
    UPDATE task_counts SET n = n - 1
    WHERE state = old.state AND stalled = old.stalled AND is_root = old.is_root;
    INSERT INTO task_counts (state, stalled, is_root, n)
    VALUES (new.state, new.stalled, new.is_root, 1)
    ON CONFLICT (state, stalled, is_root) DO UPDATE SET n = n + 1;
END;
