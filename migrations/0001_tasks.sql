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
    definition TEXT NOT NULL
) STRICT;

-- Listing filters walk these in seq order, so a page costs the same however many tasks exist.
CREATE INDEX tasks_by_state ON tasks (state, seq);
CREATE INDEX tasks_by_parent ON tasks (parent_id, seq);
CREATE INDEX tasks_by_stalled ON tasks (stalled, seq);
